"""Kubernetes naming and quantity rules, so that nothing a user wrote can inject fields into a manifest.

Rules follow the Kubernetes API conventions: DNS-1123 labels and subdomains for names, qualified names for
label keys, the label-value grammar, and the resource quantity grammar (``500m``, ``16Gi``, ``2e3``).
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# An image reference as the container runtime parses it (distribution/reference's grammar, ASCII only):
# [domain[:port]/]path[:tag][@digest]. A domain may have capitals; path components are lowercase.
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
QUANTITY_PATTERN = r"^([+]?[0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a Secret's or ConfigMap's data key


def check_object_name(value: str, what: str) -> str:
    """A Secret's or ConfigMap's name: a DNS-1123 subdomain (at most 253 characters)."""
    if len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not a Kubernetes object name (lower-case DNS subdomain)")
    return value


def check_dns_label(value: str, what: str = "name", max_len: int = 63) -> str:
    if len(value) > max_len or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid DNS-1123 label: lower-case letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {max_len} characters"
        )
    return value


def check_namespace_option(namespace: str | None) -> None:
    """``--namespace`` of solve and autoscale: a DNS label, else bad input (exit 2)."""
    from placer.model.errors import InputError

    if namespace is not None:
        try:
            check_dns_label(namespace, "--namespace")
        except ValueError as exc:
            raise InputError(str(exc)) from None


def check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"label key {key!r}: prefix must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"label key {key!r}: name part must be 1-63 characters of [A-Za-z0-9-_.]")
    return key


def check_label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"label value {value!r}: at most 63 characters of [A-Za-z0-9-_.], alphanumeric ends")
    return value


MAX_EXPONENT = 30  # no node has 1e30 bytes or cores; larger values are typos or attacks


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity into a Decimal of base units (cores, bytes)."""
    raw = str(text)
    match = _QUANTITY.fullmatch(raw)
    if not match:
        spaced = " (without the spaces around it: the API server refuses them)" if raw != raw.strip() else ""
        raise ValueError(f"{raw!r} is not a Kubernetes quantity (examples: 500m, 4, 16Gi, 1.5e3){spaced}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except ArithmeticError as exc:  # pragma: no cover - regex already restricts the digits
        raise ValueError(f"{raw!r} is not a number") from exc
    if suffix not in _SUFFIX:  # an exponent, e.g. 1.5e3 (the regex admits only digits after the e)
        exponent = int(suffix[1:])
        # Bound the magnitude before building the number: 1e999999 would be a million-digit integer.
        if abs(exponent) > MAX_EXPONENT or value.adjusted() + exponent > MAX_EXPONENT:
            raise ValueError(f"{raw!r} is out of range (at most about 1e{MAX_EXPONENT})")
        value = value.scaleb(exponent)
    else:
        value = value * _SUFFIX[suffix]
    if value.adjusted() > MAX_EXPONENT:
        raise ValueError(f"{raw!r} is out of range (at most about 1e{MAX_EXPONENT})")
    return value


MAX_CPU_CORES = 1_000_000  # a node's or a pod's CPU; keeps the model's millicore sums inside 64 bits
MAX_MEMORY_BYTES = 2**50  # 1Pi: a node's or a pod's memory, for the same reason


def check_cpu(text: str) -> str:
    """A CPU quantity that the model's integer arithmetic can hold."""
    if parse_quantity(text) > MAX_CPU_CORES:
        raise ValueError(f"{str(text)!r} is over the limit of {MAX_CPU_CORES} cores")
    return text


def check_memory(text: str) -> str:
    """A memory quantity that the model's integer arithmetic can hold."""
    if parse_quantity(text) > MAX_MEMORY_BYTES:
        raise ValueError(f"{str(text)!r} is over the limit of 1Pi bytes")
    return text


@functools.lru_cache(maxsize=4096)  # a 100k-GPU cluster asks for its node classes' few values 50k times
def millicores(text: str | int | float) -> int:
    return int((parse_quantity(text) * 1000).to_integral_value(rounding="ROUND_CEILING"))


@functools.lru_cache(maxsize=4096)
def bytes_of(text: str | int | float) -> int:
    return int(parse_quantity(text).to_integral_value(rounding="ROUND_CEILING"))


def field_alias(name: str) -> str:
    """snake_case -> the camelCase Kubernetes users expect, keeping unit spellings: memoryGiB, bandwidthGBps."""
    head, *rest = name.split("_")
    camel = head + "".join(w[:1].upper() + w[1:] for w in rest)
    return camel.replace("Gib", "GiB").replace("Gbps", "GBps")


def _quantity(value: str) -> str:
    parse_quantity(value)
    return value


def quantity_text(value: object) -> object:
    """A quantity written as a YAML number (``cpu: 16``, ``cpu: 0.5``), which Kubernetes takes too, as the
    string placer prints (``"16"``, ``"0.5"``); a boolean is refused, anything else is left to the string check."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity such as 16 or 500m, got {'true' if value else 'false'}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"expected a quantity such as 16 or 500m, got {value}")
        text = format(Decimal(repr(value)).normalize(), "f")
        return text if len(text) <= 20 else repr(value)  # 1e+300 stays short in messages (and is a quantity)
    return value


# Kubernetes' own schemas type a quantity as int-or-string; so do placer's (json_schema_input_type).
_AS_TEXT = BeforeValidator(
    quantity_text,
    json_schema_input_type=Annotated[str, Field(pattern=QUANTITY_PATTERN)] | Annotated[float, Field(ge=0)],
)
QuantityText = Annotated[str, _AS_TEXT]
"""A value of a requests/limits map: a string, or a number taken as its string."""
CpuQuantity = Annotated[str, _AS_TEXT, AfterValidator(_quantity), AfterValidator(check_cpu)]
"""A CPU quantity, at most ``MAX_CPU_CORES``."""
MemoryQuantity = Annotated[str, _AS_TEXT, AfterValidator(_quantity), AfterValidator(check_memory)]
"""A memory quantity, at most ``MAX_MEMORY_BYTES``."""
