"""The error family: bad input is an exception with an exit code; an infeasible request is not an error
of the input but an outcome, so it gets its own type that carries the explanation."""

from __future__ import annotations


class PlacerError(Exception):
    """Base class; ``exit_code`` is what the CLI returns."""

    exit_code = 2


class InputError(PlacerError):
    """A file the user gave is malformed or inconsistent. Message names file, field path and line."""

    exit_code = 2


class NameTooLong(InputError):
    """A generated object name over its kind's limit: the spec's names are the user's to shorten (the
    pipeline gives it the line of the spec's metadata.name)."""


class InfeasibleError(PlacerError):
    """No placement satisfies the hard constraints; ``reasons`` lists the conflicting constraints."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        reasons: list[str] | None = None,
        conflicts: list | None = None,
        proven: bool = True,
        notes: list[str] | None = None,
    ):
        super().__init__(message)
        self.reasons = reasons or []
        self.conflicts = conflicts or []  # placer.solver.conflicts.Conflict, for explain --why-not
        self.proven = proven  # False: nothing found within the time limit, impossibility not shown
        self.notes = notes or []  # what the reasons depend on beyond the input (the wall-clock guard ended them)


class VerificationError(PlacerError):
    """The independent checker rejected a placement: a bug in placer, never the user's fault."""

    exit_code = 3
