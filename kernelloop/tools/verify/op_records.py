"""Op records of every trial set, as both children send them and the parent reads them.

Each child records the aten ops of each trial set's forward (_runtime.OpRecorder): the trusted job
the reference's, once per input signature (shapes, dtypes, strides and plain values: another
workload's or a variant's sets have other shapes, and so other work); the candidate's child the
candidate's, on every set, so a forward that tells the first set apart (review35) shows torch's
work wherever it leaves it to torch. Sets of one shape usually record alike, so a message carries
each distinct record once (`op_records`) and, per set, which one is its (`set_records`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelloop.tools.verify.claims import claimed_counts

MAX_RECORDS = 1_000  # distinct records a message may hold; a problem has at most a few hundred sets


@dataclass(frozen=True)
class SetOps:
    """One set's record: each compute op with its calls, each op's elements (copies as "copy"),
    and (the candidate's) the elements of its own kernels' outputs the forward used."""

    counts: dict[str, int] = field(default_factory=dict)
    work: dict[str, int] = field(default_factory=dict)
    own_used: int = 0


def encode(records: list[dict[str, Any]]) -> dict[str, list]:
    """`records` (one plain dict per set) as each distinct one once and, per set, its index."""
    distinct: list[dict[str, Any]] = []
    index_of: dict[str, int] = {}
    sets = []
    for record in records:
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in index_of:
            index_of[key] = len(distinct)
            distinct.append(record)
        sets.append(index_of[key])
    return {"op_records": distinct, "set_records": sets}


def decode(message: dict, sets: int) -> list[SetOps] | None:
    """Each of `sets` sets' record from a message `encode` made; None where it holds none for every
    set (a child of the candidate's may send anything: every field is checked, as claims are)."""
    raw, indices = message.get("op_records"), message.get("set_records")
    if not isinstance(raw, list) or not isinstance(indices, list) or len(indices) != sets or len(raw) > MAX_RECORDS:
        return None
    records = [one(record) for record in raw]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(records) for i in indices):
        return None
    return [records[i] for i in indices]


def numbers(raw: object, sets: int) -> list[int]:
    """One non-negative int per set (the trusted job's signature numbers), else []."""
    if isinstance(raw, list) and len(raw) == sets and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                          for n in raw):
        return list(raw)
    return []


def one(record: object) -> SetOps:
    """A record's fields as claims: counts of names, a non-negative int; anything else dropped."""
    if not isinstance(record, dict):
        return SetOps()
    own_used = record.get("own_used")
    return SetOps(claimed_counts(record.get("ops")), claimed_counts(record.get("op_work")),
                  own_used if isinstance(own_used, int) and not isinstance(own_used, bool) and own_used >= 0 else 0)


def signature(value: object) -> Any:
    """What a forward's ops may depend on besides the values: each tensor's shape, dtype and strides,
    every other input as its repr (bounded); nested lists and tuples followed."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), tuple(value.stride()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(signature(item) for item in value))
    return (type(value).__name__, repr(value)[:200])
