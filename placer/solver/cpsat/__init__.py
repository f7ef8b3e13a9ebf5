"""The CP-SAT model of one ``Problem``: its variables and its constraint families."""
