"""Dtype mismatches: matmul/linear, scalar types (new and legacy wordings), RNN inputs and
hidden states, loss targets, casts of a result, embedding indices, float64 on MPS."""

from __future__ import annotations

import re
from typing import Optional

from torchdevmagic.diagnosis.rules.base import (
    DTYPE_MISMATCH,
    Match,
    Rule,
    make,
    regex_rule,
    unique,
)

RULES: list[Rule] = []
rule = regex_rule(RULES)

_SCALAR_TYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
    "long int": "int64",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
}


def norm_dtype(text: str) -> str:
    """``Half``, ``c10::Half``, ``struct c10::Half``, ``torch.float16``, ``HalfTensor`` ->
    ``float16``."""
    t = text.strip().strip("'\"")
    t = t.replace("struct ", "").replace("c10::", "").replace("torch.", "")
    t = t.replace("cuda.", "")
    if t.endswith("Tensor"):
        t = t[: -len("Tensor")]
    if t.startswith("CPU") and t.endswith("Type"):  # CPUBFloat16Type
        t = t[3:-4]
    low = t.lower()
    return _SCALAR_TYPES.get(low, low)


def dtype_match(name: str, expected: str, odd: str, argument: Optional[str] = None) -> Match:
    exp, got = norm_dtype(expected), norm_dtype(odd)
    return make(
        DTYPE_MISMATCH, name, dtypes=unique(got, exp), expected=exp, odd=got, argument=argument
    )


@rule(r"(mat1|self) and mat2 must have the same dtype, but got (\w+) and (\w+)")
def mat1_mat2_dtype(m: re.Match[str]) -> Match:
    """Linear/addmm: mat1 is the input, mat2 the weight (the weight's dtype is the target)."""
    return dtype_match("mat1_mat2_dtype", m.group(3), m.group(2), argument=m.group(1))


@rule(r"expected (?:m1|mat1) and (?:m2|mat2) to have the same dtype, but got: (\S+) != (\S+)")
def mm_dtype(m: re.Match[str]) -> Match:
    return dtype_match("mm_dtype", m.group(2), m.group(1), argument="mat1")


@rule(r"expected scalar type (\w+) but found (\w+)")
def expected_scalar_type(m: re.Match[str]) -> Match:
    return dtype_match("expected_scalar_type", m.group(1), m.group(2))


@rule(r"Expected object of scalar type (\w+) but got scalar type (\w+) for argument #\d+ '(\w+)'")
def legacy_scalar_type(m: re.Match[str]) -> Match:
    return dtype_match("legacy_scalar_type", m.group(1), m.group(2), argument=m.group(3))


@rule(r"RNN input dtype \((\S+)\) does not match weight dtype \((\S+)\)")
def rnn_input_dtype(m: re.Match[str]) -> Match:
    return dtype_match("rnn_input_dtype", m.group(2), m.group(1), argument="input")


@rule(r"input must have the type (\S+), got type (\S+)")
def rnn_input_type(m: re.Match[str]) -> Match:
    return dtype_match("rnn_input_type", m.group(1), m.group(2), argument="input")


@rule(
    r"Input and (\w+) tensors are not the same dtype, found input tensor with (\w+) and \w+ "
    r"tensor with (\w+)"
)
def rnn_hidden_dtype(m: re.Match[str]) -> Match:
    return dtype_match("rnn_hidden_dtype", m.group(2), m.group(3), argument=m.group(1))


@rule(r"expected target dtype to be Long or Byte, but got (\w+)")
def target_dtype(m: re.Match[str]) -> Match:
    return dtype_match("target_dtype", "Long", m.group(1), argument="target")


@rule(r"Found dtype (\w+) but expected (\w+)")
def found_dtype_expected(m: re.Match[str]) -> Match:
    return dtype_match("found_dtype_expected", m.group(2), m.group(1))


@rule(r"result type (\w+) can't be cast to the desired output type (\w+(?: int)?)")
def result_type_cast(m: re.Match[str]) -> Match:
    """BCE-with-logits with integer targets (and other ops writing into an integer tensor)."""
    return dtype_match("result_type_cast", m.group(1), m.group(2))


@rule(
    r"Expected tensor for argument #\d+ '(\w+)' to have (?:one of the following scalar types: "
    r"[\w, ]+|scalar type \w+); but got (\S+) instead"
)
def indices_scalar_type(m: re.Match[str]) -> Match:
    """embedding: the indices are floating point (or int32 where int64 is wanted)."""
    return dtype_match("indices_scalar_type", "Long", m.group(2), argument=m.group(1))


@rule(r"Cannot convert a MPS Tensor to float64 dtype")
def mps_float64(m: re.Match[str]) -> Match:
    return dtype_match("mps_float64", "float32", "float64")
