#!/usr/bin/env python3
"""A hostile-input sweep over the trainer's files: a small real run's checkpoint.safetensors and
model.safetensors, a small pretraining's encoder.safetensors and checkpoint.safetensors, and a small
NBSVM's nbsvm.safetensors, mutated systematically (structure, names, shapes, dtypes, counts, sizes and
offsets, metadata values, non-finite values), and `imdb check` + `imdb train --resume` run on each
broken checkpoint, `imdb predict` + `imdb eval` on each broken model file, `imdb train --init` on each
broken encoder, `imdb check` + `imdb pretrain --resume` on each broken pretraining checkpoint and
`imdb eval` on each broken NBSVM file.

Each mutation is either one the programs must refuse, with a message naming the problem (a
fragment of it is listed with the mutation), or one they must accept with the same result as the
original file (the file says the same thing differently). A refused --resume must leave every file
of its folder as it was (a refused --init, its --out too). Any other outcome fails: a crash or other signal, a sanitizer report, a
run over the time limit, a silent acceptance, an error that does not name the problem.

    tests/fuzz/hostile_checkpoints.py <imdb binary> <imdb_small.json> [--every N] [--keep DIR]

--every N runs every Nth mutation only (the sanitizer build, where each run is several times slower).

Prints one line per failure and a summary with the counts (docs/reliability.md quotes them).
"""
import concurrent.futures
import copy
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT_S = 120
SMALL = ["--dim", "16", "--heads", "2", "--layers", "1", "--ffn", "32", "--max-len", "64", "--batch-size", "16",
         "--epochs", "2", "--seed", "5", "--quiet"]


# ---- safetensors, read and written by hand (so that the files can be broken in any way)

def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = []  # in data order: [name, dtype, shape, bytes]
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        tensors.append([name, info["dtype"], list(info["shape"]), data[begin:end]])
    return metadata, tensors


def header_of(metadata, tensors):
    header = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    return header


def pack(header_text, data, length=None):
    if isinstance(header_text, dict):
        header_text = json.dumps(header_text, separators=(",", ":"))
    header = header_text.encode() if isinstance(header_text, str) else header_text
    header += b" " * ((8 - len(header) % 8) % 8)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def build(metadata, tensors, length_delta=0):
    header = json.dumps(header_of(metadata, tensors), separators=(",", ":")).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header) + length_delta) + header + b"".join(t[3] for t in tensors)


def content_sha256(metadata, tensors):
    """The trainer's content_sha256 (examples/imdb/checkpoints.cpp), to make edits it cannot see."""
    names = {"F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32", "BOOL": "bool"}
    h = hashlib.sha256()
    def text(s):
        b = s.encode()
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    for key in sorted(metadata):
        if key != "content_sha256":
            text(key)
            text(metadata[key])
    for name, dtype, shape, data in sorted(tensors, key=lambda t: t[0]):
        text(name)
        text(names[dtype])
        for dim in shape:
            h.update(struct.pack("<q", dim))
        h.update(data)
    return h.hexdigest()


# ---- Mutations: (name, target file, function of (metadata, tensors) -> file bytes, expected)
# expected: ("reject", [fragments, any of which the output must contain]) or ("accept", None)

def reject(*fragments):
    return ("reject", list(fragments))


ACCEPT = ("accept", None)


def find(tensors, name):
    for t in tensors:
        if t[0] == name:
            return t
    raise KeyError(name)


def first_float(tensors, prefix):
    return next(t for t in tensors if t[1] == "F32" and t[0].startswith(prefix) and len(t[3]) >= 8)


def with_meta(key, value, reseal=False):
    def mutate(meta, tensors):
        meta = dict(meta)
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
        if reseal:
            meta["content_sha256"] = content_sha256(meta, tensors)
        return build(meta, tensors)
    return mutate


def with_tensors(edit, reseal=False):
    def mutate(meta, tensors):
        tensors = copy.deepcopy(tensors)
        tensors = edit(tensors) or tensors
        meta = dict(meta)
        if reseal:
            meta["content_sha256"] = content_sha256(meta, tensors)
        return build(meta, tensors)
    return mutate


def raw_header(edit):
    """Edits the header JSON object itself (offsets as written), data unchanged."""
    def mutate(meta, tensors):
        header = header_of(meta, tensors)
        edit(header)
        return pack(header, b"".join(t[3] for t in tensors))
    return mutate


def set_value(name_prefix, value_bytes, reseal=False):
    def edit(tensors):
        t = first_float(tensors, name_prefix)
        t[3] = value_bytes + t[3][len(value_bytes):]
    return with_tensors(edit, reseal)


def structure_mutations(target, weight, shape=("has shape",)):
    """Mutations that apply to any safetensors file; `weight` names a float tensor of it, whose wrong shape its reader
    names with one of `shape`."""
    m = []
    add = lambda name, fn, expected: m.append((f"{target}: {name}", target, fn, expected))
    add("empty file", lambda meta, t: b"", reject("too small"))
    add("7 bytes", lambda meta, t: b"\x10\0\0\0\0\0\0", reject("too small"))
    add("header length 0", lambda meta, t: struct.pack("<Q", 0) + build(meta, t)[8:], reject("does not start with '{'"))
    add("header length 2^63", lambda meta, t: struct.pack("<Q", 1 << 63) + build(meta, t)[8:], reject("over the"))
    add("header length = file size", lambda meta, t: struct.pack("<Q", len(build(meta, t))) + build(meta, t)[8:],
        reject("truncated"))
    add("header length one byte short", lambda meta, t: build(meta, t, -1),
        reject("the tensors cover", "not valid JSON"))
    add("header length one byte long", lambda meta, t: build(meta, t, +1),
        reject("not valid JSON", "go past the end", "the tensors cover"))
    add("header length 8 bytes short", lambda meta, t: build(meta, t, -8), reject("not valid JSON", "the tensors cover"))
    add("header is a JSON array", lambda meta, t: pack("[1, 2]", b""), reject("does not start with '{'"))
    add("header JSON cut short", lambda meta, t: pack(json.dumps(header_of(meta, t))[:-1], b"".join(x[3] for x in t)),
        reject("not valid JSON"))
    add("header JSON with trailing text", lambda meta, t: pack(json.dumps(header_of(meta, t)) + " x",
                                                               b"".join(x[3] for x in t)), reject("not valid JSON"))
    add("header not UTF-8", lambda meta, t: pack(b'{"caf\xc3": 1}', b""), reject("not valid JSON"))
    add("a tensor entry is a string", raw_header(lambda h: h.__setitem__(weight, "F32")), reject("header entry is a JSON string"))
    add("__metadata__ is an array", raw_header(lambda h: h.__setitem__("__metadata__", [1])), reject("is not an object"))
    add("a metadata value is a number", raw_header(lambda h: h["__metadata__"].__setitem__("dim", 16)),
        reject("metadata 'dim' is not a string"))
    add("a tensor name twice", lambda meta, t: pack(json.dumps(header_of(meta, t))[:-1] + ',"' + weight + '":' +
                                                    json.dumps(header_of(meta, t)[weight]) + "}",
                                                    b"".join(x[3] for x in t)), reject(f"'{weight}' appears twice"))
    add("file cut by one byte", lambda meta, t: build(meta, t)[:-1], reject("go past the end", "the tensors cover"))
    add("file cut in half", lambda meta, t: build(meta, t)[:len(build(meta, t)) // 2],
        reject("go past the end", "truncated", "not valid JSON"))
    add("8 bytes appended", lambda meta, t: build(meta, t) + b"\0" * 8, reject("the tensors cover"))
    add("overlapping tensors", raw_header(lambda h: h[weight]["data_offsets"].__setitem__(
        0, h[weight]["data_offsets"][0] + 4) or h[weight]["data_offsets"].__setitem__(1, h[weight]["data_offsets"][1] + 4)),
        reject("overlap", "go past the end", "belong to no tensor"))
    add("offsets past the end", raw_header(lambda h: h[weight].__setitem__("data_offsets", [10**9, 10**9 + 4])),
        reject("go past the end"))
    add("offsets reversed", raw_header(lambda h: h[weight].__setitem__("data_offsets", h[weight]["data_offsets"][::-1])),
        reject("not a valid [begin, end]"))
    add("offsets not integers", raw_header(lambda h: h[weight].__setitem__(
        "data_offsets", [float(x) for x in h[weight]["data_offsets"]])), reject("not a valid [begin, end]"))
    add("offsets of three numbers", raw_header(lambda h: h[weight]["data_offsets"].append(0)), reject("is not [begin, end]"))
    add("shape negative", raw_header(lambda h: h[weight].__setitem__("shape", [-1] + h[weight]["shape"][1:])),
        reject("not a non-negative integer"))
    add("shape overflowing", raw_header(lambda h: h[weight].__setitem__("shape", [1 << 62, 1 << 62])),
        reject("too many elements"))
    add("shape not an array", raw_header(lambda h: h[weight].__setitem__("shape", 4)), reject("is not an array"))
    add("shape of floats", raw_header(lambda h: h[weight].__setitem__("shape", [float(d) for d in h[weight]["shape"]])),
        reject("not a non-negative integer"))
    add("shape [] (bytes left)", raw_header(lambda h: h[weight].__setitem__("shape", [])), reject("needs 4 bytes"))
    add("shape with a zero", raw_header(lambda h: h[weight].__setitem__("shape", [0] + h[weight]["shape"][1:])),
        reject("needs 0 bytes"))
    add("dtype F64 (bytes unchanged)", raw_header(lambda h: h[weight].__setitem__("dtype", "F64")), reject("needs"))
    add("dtype F33", raw_header(lambda h: h[weight].__setitem__("dtype", "F33")), reject('unknown dtype "F33"'))
    add("dtype f32", raw_header(lambda h: h[weight].__setitem__("dtype", "f32")), reject('unknown dtype "f32"'))
    add("dtype a number", raw_header(lambda h: h[weight].__setitem__("dtype", 32)), reject('"dtype" is not a string'))
    add("dtype missing", raw_header(lambda h: h[weight].pop("dtype")), reject('has no "dtype"'))
    add("dtype I32 (same size)", with_tensors(lambda ts: find(ts, weight).__setitem__(1, "I32")),
        reject("dtype", "int32"))
    add("dtype BF16, shape doubled", with_tensors(lambda ts: find(ts, weight).__setitem__(1, "BF16") or
                                                  find(ts, weight).__setitem__(2, find(ts, weight)[2][:-1] +
                                                                               [find(ts, weight)[2][-1] * 2])),
        reject(*shape, "holds NaN"))  # bfloat16 loads (issue 16): the doubled shape (or a NaN its bytes make) refused
    add("shape transposed (same bytes)", with_tensors(lambda ts: find(ts, weight).__setitem__(2, find(ts, weight)[2][::-1])),
        reject(*shape))
    add("shape flattened (same bytes)", with_tensors(lambda ts: find(ts, weight).__setitem__(
        2, [find(ts, weight)[2][0] * find(ts, weight)[2][1]])), reject(*shape))
    add("NaN in a weight", set_value(weight, struct.pack("<f", float("nan"))), reject("holds NaN"))
    add("+Inf in a weight", set_value(weight, struct.pack("<f", float("inf"))), reject("holds +Inf"))
    add("-Inf in a weight", set_value(weight, struct.pack("<f", float("-inf"))), reject("holds -Inf"))
    add("NaN in a weight, checksum redone", set_value(weight, struct.pack("<f", float("nan")), reseal=True), reject("holds NaN"))
    add("a weight's bits flipped", set_value(weight, struct.pack("<f", 0.125)), reject("differ from the checksum"))
    add("content_sha256 changed", with_meta("content_sha256", "0" * 64), reject("differ from the checksum"))
    add("content_sha256 removed", with_meta("content_sha256", None), reject("has no 'content_sha256'"))
    add("an unknown metadata key added", with_meta("note", "hello"), reject("differ from the checksum"))
    # The same contents written differently: accepted, with the same result.
    add("header pretty-printed, keys reversed", lambda meta, t: pack(json.dumps(
        dict(reversed(list(header_of(meta, t).items()))), indent=2), b"".join(x[3] for x in t)), ACCEPT)
    add("header unpadded", lambda meta, t: (lambda h: struct.pack("<Q", len(h)) + h + b"".join(x[3] for x in t))(
        json.dumps(header_of(meta, t)).encode()), ACCEPT)
    add("header padded with 64 spaces", lambda meta, t: (lambda h: struct.pack("<Q", len(h)) + h + b"".join(
        x[3] for x in t))(json.dumps(header_of(meta, t)).encode() + b" " * 64), ACCEPT)
    add("tensors stored in reverse order", lambda meta, t: build(meta, list(reversed(t))), ACCEPT)
    add("metadata keys reordered", lambda meta, t: build(dict(reversed(list(meta.items()))), t), ACCEPT)
    return m


def metadata_mutations(target, step_keys):
    m = []
    add = lambda name, fn, expected: m.append((f"{target}: {name}", target, fn, expected))
    cases = [
        ("vocab_size", "53", "token_embedding.weight"), ("vocab_size", "100000000", "token_embedding.weight"),
        ("vocab_size", "0", "'vocab_size' = '0'"), ("vocab_size", "-5", "'vocab_size' = '-5'"),
        ("vocab_size", "1e9", "'vocab_size' = '1e9'"), ("dim", "32", "token_embedding.weight"),
        ("max_len", "65", "position_embedding.weight"), ("ffn_dim", "64", "fc1.weight"),
        ("layers", "2", "the settings say 2 layers"), ("layers", "0", "is not a block of a 0-layer model"),
        ("layers", "1000000", "'layers' = '1000000'"), ("classes", "1", "'classes' = '1'"),
        ("classes", "3", "'classes' = '3'"), ("heads", "3", "not divisible by heads = 3"),
        ("heads", "1e3", "'heads' = '1e3'"), ("heads", "4", "differ from the checksum"),
        ("heads", "0", "'heads' = '0'"), ("heads", "", "'heads' = ''"), ("heads", None, "no 'heads'"),
        ("batch_size", "7junk", "'batch_size' = '7junk'"), ("batch_size", "9223372036854775807", "'batch_size'"),
        ("epochs", "3.5", "'epochs' = '3.5'"), ("epochs", "0", "'epochs' = '0'"),
        ("epochs", "99999999999999999999", "'epochs'"), ("lr", "nan", "'lr' = 'nan'"), ("lr", "inf", "'lr' = 'inf'"),
        ("lr", "-1", "'lr' = '-1'"), ("dropout", "0.5x", "'dropout' = '0.5x'"), ("dropout", "0.5", "differ from the checksum"),
        ("seed", "-1", "'seed' = '-1'"), ("seed", "1.5", "'seed'"), ("schedule", "sometimes", "schedule = 'sometimes'"),
        ("limit", "-3", "'limit' = '-3'"), ("warmup", "2", "'warmup' = '2'"), ("clip", "1e400", "'clip'"),
        ("format", None, "format"), ("format", "ember-imdb-checkpoint-v0", "format"),
    ]
    for key, value, fragment in cases:
        # A setting no tensor shows: the checksum refuses it, or a --resume's settings check first.
        alternative = f"written with other settings: {key}" if "checksum" in fragment else fragment
        add(f"metadata {key} = {value!r}", with_meta(key, value), reject(fragment, alternative))
        if "checksum" not in fragment:  # the same with the checksum redone: the check that names it must still fire
            add(f"metadata {key} = {value!r}, checksum redone", with_meta(key, value, reseal=True), reject(fragment))
    for key, value, fragment in step_keys:
        add(f"metadata {key} = {value!r}", with_meta(key, value), reject(fragment, "differ from the checksum"
                                                                        if key == "data_fingerprint" else fragment))
        add(f"metadata {key} = {value!r}, checksum redone", with_meta(key, value, reseal=True), reject(fragment))
    return m


def moment_mutations(add, reseal):
    """AdamW's moments in a checkpoint (a classifier's or a pretraining's) broken: one or all missing, NaN, negative."""
    sealed = ", checksum redone" if reseal else ""
    add("one moment missing" + sealed, with_tensors(lambda ts: [t for t in ts if t[0] != "optim.3.exp_avg"], reseal),
        reject("has '3.exp_avg_sq' but no '3.exp_avg'"))
    add("every moment missing" + sealed, with_tensors(lambda ts: [t for t in ts if not t[0].startswith("optim.") or
                                                                  t[0] == "optim.step"], reseal),
        reject("lacks 'optim.0.exp_avg'"))
    add("NaN in a moment" + sealed, set_value("optim.0.exp_avg", struct.pack("<f", float("nan")), reseal),
        reject("holds NaN"))
    add("a negative second moment" + sealed, set_value("optim.0.exp_avg_sq", struct.pack("<f", -1.0), reseal),
        reject("a second moment must be >= 0", "differ from the checksum"))


def checkpoint_mutations(step, total):
    m = structure_mutations("checkpoint", "model.head.weight")
    m += metadata_mutations("checkpoint", [
        ("step", "12abc", "'step' = '12abc'"), ("step", "-1", "'step' = '-1'"), ("step", "1e1", "'step' = '1e1'"),
        ("step", "9223372036854775807", "'step' = '9223372036854775807'"),
        ("step", str(total + 1), f"step {total + 1} is past the end of the run"),
        ("step", str(step + 1), f"the optimiser has taken {step} steps but the checkpoint says {step + 1}"),
        ("total_steps", "0", "'total_steps' = '0'"), ("total_steps", "x", "'total_steps' = 'x'"),
        ("generator_offset", "-1", "'generator_offset' = '-1'"), ("generator_offset", "1x", "'generator_offset'"),
        ("epoch_loss_sum", "nan", "'epoch_loss_sum'"), ("epoch_loss_sum", "-1", "'epoch_loss_sum'"),
        ("epoch_loss_sum", " 1", "'epoch_loss_sum'"), ("data_fingerprint", "zz", "'data_fingerprint'"),
        ("data_fingerprint", "0" * 64, "was trained on other data"),  # check accepts it: only --resume can tell
    ])
    add = lambda name, fn, expected: m.append((f"checkpoint: {name}", "checkpoint", fn, expected))
    def drop(*names):
        return lambda ts: [t for t in ts if t[0] not in names]
    def rename(old, new):
        return lambda ts: find(ts, old).__setitem__(0, new)
    def int64_step(value):
        return lambda ts: find(ts, "optim.step").__setitem__(3, struct.pack("<q", value))
    for reseal in (False, True):
        sealed = ", checksum redone" if reseal else ""
        add("model tensor missing" + sealed, with_tensors(drop("model.head.bias"), reseal), reject("'head.bias' is missing"))
        add("model tensor renamed" + sealed, with_tensors(rename("model.head.bias", "model.head.biass"), reseal),
            reject("head.bias"))
        add("extra model tensor" + sealed, with_tensors(lambda ts: ts.append(["model.extra", "F32", [1], b"\0" * 4]),
                                                        reseal), reject("unexpected: 'extra'"))
        add("extra tensor without prefix" + sealed, with_tensors(lambda ts: ts.append(["stray", "F32", [1], b"\0" * 4]),
                                                                 reseal), reject("unexpected tensor 'stray'"))
        add("tensor with an empty name" + sealed, with_tensors(lambda ts: ts.append(["", "F32", [1], b"\0" * 4]), reseal),
            reject("unexpected tensor ''"))
        add("optim.step missing" + sealed, with_tensors(drop("optim.step"), reseal), reject("'optim.step' is missing"))
        add("optim.step is F64" + sealed, with_tensors(lambda ts: find(ts, "optim.step").__setitem__(1, "F64"), reseal),
            reject("'optim.step' is missing or is not one int64"))
        add("optim.step has 2 values" + sealed, with_tensors(lambda ts: find(ts, "optim.step").__setitem__(2, [2]) or
                                                            find(ts, "optim.step").__setitem__(3, b"\0" * 16), reseal),
            reject("'optim.step' is missing or is not one int64"))
        for value in (-1, 2**63 - 1, -2**63, step + 1):
            add(f"optim.step = {value}" + sealed, with_tensors(int64_step(value), reseal),
                reject(f"the optimiser has taken {value} steps"))
        add("both moments of a parameter missing" + sealed, with_tensors(drop("optim.3.exp_avg", "optim.3.exp_avg_sq"),
                                                                         reseal), reject("lacks 'optim.3.exp_avg'"))
        add("moment index not a number" + sealed, with_tensors(rename("optim.3.exp_avg", "optim.x.exp_avg"), reseal),
            reject("unexpected entry 'x.exp_avg'"))
        add("moment index with a leading zero" + sealed, with_tensors(rename("optim.3.exp_avg", "optim.03.exp_avg"), reseal),
            reject("leading zeros"))
        add("moment index with a sign" + sealed, with_tensors(rename("optim.3.exp_avg", "optim.+3.exp_avg"), reseal),
            reject("unexpected entry '+3.exp_avg'"))
        add("moment index out of range" + sealed, with_tensors(rename("optim.3.exp_avg", "optim.999.exp_avg"), reseal),
            reject("refers to parameter 999"))
        add("moment of an unknown kind" + sealed, with_tensors(rename("optim.3.exp_avg", "optim.3.momentum"), reseal),
            reject("'3.momentum' is not a buffer of this optimiser"))
        add("moments of two parameters swapped" + sealed, with_tensors(
            lambda ts: rename("optim.0.exp_avg", "optim.T")(ts) or rename("optim.1.exp_avg", "optim.0.exp_avg")(ts) or
            rename("optim.T", "optim.1.exp_avg")(ts), reseal), reject("optimizer state: '", "differ from the checksum"))
        moment_mutations(add, reseal)
    return m


def model_mutations():
    m = structure_mutations("model", "head.weight")
    m += metadata_mutations("model", [("vocab_sha256", "0" * 64, "vocab.txt is not the vocabulary"),
                                      ("vocab_sha256", None, "no 'vocab_sha256'")])
    weights_tensor_mutations(lambda name, fn, expected: m.append((f"model: {name}", "model", fn, expected)), "head.bias")
    return m


def weights_tensor_mutations(add, missing):
    """A model's weights (a classifier's model file, an encoder): the tensor `missing` left out, one more, the names
    a checkpoint gives them."""
    for reseal in (False, True):
        add("tensor missing" + (", checksum redone" if reseal else ""),
            with_tensors(lambda ts: [t for t in ts if t[0] != missing], reseal), reject(f"'{missing}' is missing"))
    add("extra tensor, checksum redone", with_tensors(lambda ts: ts.append(["extra", "F32", [1], b"\0" * 4]), True),
        reject("unexpected: 'extra'"))
    add("checkpoint names (model. prefix), checksum redone",
        with_tensors(lambda ts: [t.__setitem__(0, "model." + t[0]) for t in ts] and None, True),
        reject("has no tensor 'token_embedding.weight'"))


def encoder_mutations():
    """A pretraining's encoder.safetensors, read by imdb train --init (a classifier holding out 20 reviews)."""
    m = structure_mutations("encoder", "blocks.0.fc1.weight")
    m += metadata_mutations("encoder", [])
    add = lambda name, fn, expected: m.append((f"encoder: {name}", "encoder", fn, expected))
    for key, value, fragment in [("vocab_sha256", "0" * 64, "vocab.txt is not the vocabulary"),
                                 ("vocab_sha256", None, "vocab.txt is not the vocabulary"),
                                 ("validation_reviews_sha256", "0" * 64, "not this run's 20 validation reviews"),
                                 ("validation", "10", "records validation = 10, the checkpoint beside it 20"),
                                 ("heads", "4", "records heads = 4, the checkpoint beside it 2")]:
        add(f"metadata {key} = {value!r}", with_meta(key, value), reject("differ from the checksum", fragment))
        add(f"metadata {key} = {value!r}, checksum redone", with_meta(key, value, reseal=True), reject(fragment))
    # A file from before the held-out reviews' fingerprint was recorded: compared by count, with a warning.
    add("metadata validation_reviews_sha256 removed, checksum redone",
        with_meta("validation_reviews_sha256", None, reseal=True), ACCEPT)
    weights_tensor_mutations(add, "mlm_bias")
    add("a weight's bits changed, checksum redone (another step's encoder)",
        set_value("blocks.0.fc1.weight", struct.pack("<f", 0.125), reseal=True),
        reject("is not the model of the checkpoint beside it (step 5 of 6)"))
    return m


def pretrain_checkpoint_mutations(step, total):
    """A pretraining's checkpoint.safetensors, read by imdb check (which also holds the encoder against it) and
    imdb pretrain --resume."""
    m = structure_mutations("pretraining checkpoint", "model.blocks.0.fc1.weight")
    m += metadata_mutations("pretraining checkpoint", [
        ("step", "12abc", "'step' = '12abc'"), ("step", "-1", "'step' = '-1'"), ("step", "1e1", "'step' = '1e1'"),
        ("step", str(total + 1), f"step {total + 1} is past the end of the run"),
        ("step", str(step + 1), f"the optimiser has taken {step} steps but the checkpoint says {step + 1}"),
        ("total_steps", "0", "'total_steps' = '0'"), ("total_steps", "x", "'total_steps' = 'x'"),
        ("pretrain_steps", str(total + 1), f"'pretrain_steps' = {total + 1} but 'total_steps' = {total}"),
        ("pretrain_steps", "x", "'pretrain_steps' is not an integer"),
        ("mask_rates", "0.15,0.8", "'mask_rates' = '0.15,0.8'"), ("mask_rates", "a,b,c", "'mask_rates'"),
        ("epoch_correct", "-1", "'epoch_correct' = '-1'"), ("epoch_masked", "x", "'epoch_masked' = 'x'"),
        ("generator_offset", "-1", "'generator_offset' = '-1'"), ("generator_offset", "1x", "'generator_offset'"),
        ("epoch_loss_sum", "nan", "'epoch_loss_sum'"), ("epoch_loss_sum", "-1", "'epoch_loss_sum'"),
        ("epoch_loss_sum", " 1", "'epoch_loss_sum'"), ("data_fingerprint", "zz", "'data_fingerprint'"),
        ("data_fingerprint", "0" * 64, "was pretrained on other data"),  # check accepts it: only --resume can tell
    ])
    # A classifier's format (any version) makes the folder a mixed one, an encoder beside a classifier's checkpoint:
    # check says so, and a pretraining's --resume finds no pretraining to continue.
    mixed = reject("holds more than one kind of run (a pretraining: its encoder.safetensors; a classifier's run: its "
                   "checkpoint.safetensors)", "holds a classifier's run (its checkpoint.safetensors), not a pretraining")
    m = [(label, target, fn, mixed if "format = 'ember-imdb-checkpoint-v0'" in label else expected)
         for label, target, fn, expected in m]
    add = lambda name, fn, expected: m.append((f"pretraining checkpoint: {name}", "pretraining checkpoint", fn, expected))
    def drop(*names):
        return lambda ts: [t for t in ts if t[0] not in names]
    for reseal in (False, True):
        sealed = ", checksum redone" if reseal else ""
        add("model tensor missing" + sealed, with_tensors(drop("model.mlm_bias"), reseal), reject("'mlm_bias' is missing"))
        add("extra model tensor" + sealed, with_tensors(lambda ts: ts.append(["model.extra", "F32", [1], b"\0" * 4]),
                                                        reseal), reject("unexpected: 'extra'"))
        add("extra tensor without prefix" + sealed, with_tensors(lambda ts: ts.append(["stray", "F32", [1], b"\0" * 4]),
                                                                 reseal), reject("unexpected tensor 'stray'"))
        add("optim.step missing" + sealed, with_tensors(drop("optim.step"), reseal), reject("step"))
        add(f"optim.step = {step + 1}" + sealed, with_tensors(lambda ts: find(ts, "optim.step").__setitem__(
            3, struct.pack("<q", step + 1)), reseal), reject(f"the optimiser has taken {step + 1} steps"))
        moment_mutations(add, reseal)
    return m


def nbsvm_mutations():
    """An NBSVM's nbsvm.safetensors, read by imdb eval."""
    m = structure_mutations("nbsvm", "weight", shape=("expected float32",))
    add = lambda name, fn, expected: m.append((f"nbsvm: {name}", "nbsvm", fn, expected))
    for key, value, fragment in [("ngram_order", "0", "is malformed or out of range"),
                                 ("ngram_order", "x", "is malformed or out of range"),
                                 ("ngram_order", None, "has no 'ngram_order'"),
                                 ("ngram_buckets", "8", "expected float32 [8"),
                                 ("ngram_buckets", "0", "is malformed or out of range"),
                                 ("nb_alpha", "0", "is malformed or out of range"),
                                 ("nb_alpha", "nan", "is malformed or out of range"),
                                 ("l2", "-1", "is malformed or out of range"),
                                 ("vocab_sha256", "0" * 64, "not the vocabulary the NBSVM was trained with"),
                                 ("epochs", "0", "'epochs' = '0'"), ("lr", "nan", "'lr' = 'nan'"),
                                 ("format", None, "format"), ("format", "ember-imdb-nbsvm-v0", "format")]:
        add(f"metadata {key} = {value!r}", with_meta(key, value), reject(fragment))
        add(f"metadata {key} = {value!r}, checksum redone", with_meta(key, value, reseal=True), reject(fragment))
    for reseal in (False, True):
        sealed = ", checksum redone" if reseal else ""
        add("bias missing" + sealed, with_tensors(lambda ts: [t for t in ts if t[0] != "bias"], reseal),
            reject("holds 2 tensors"))
        add("extra tensor" + sealed, with_tensors(lambda ts: ts.append(["extra", "F32", [1], b"\0" * 4]), reseal),
            reject("holds 4 tensors"))
        add("NaN in a ratio" + sealed, set_value("ratios", struct.pack("<f", float("nan")), reseal), reject("holds NaN"))
        add("ratios as F64" + sealed, with_tensors(lambda ts: find(ts, "ratios").__setitem__(1, "F64") or
                                                   find(ts, "ratios").__setitem__(3, find(ts, "ratios")[3] * 2), reseal),
            reject("tensor 'ratios' is float64"))
    return m


# ---- Running

class Sweep:
    def __init__(self, imdb, data, work):
        self.imdb, self.data, self.work = imdb, data, work
        self.runs = self.clean_errors = self.acceptances = 0
        self.failures = []
        self.lock = threading.Lock()

    def count(self, what):
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)

    def run(self, args):
        start = time.time()
        try:
            p = subprocess.run([self.imdb] + args, capture_output=True, text=True, timeout=TIMEOUT_S,
                               errors="replace")
        except subprocess.TimeoutExpired:
            return None, f"no answer within {TIMEOUT_S} s", time.time() - start
        self.count("runs")
        return p.returncode, p.stdout + p.stderr, time.time() - start

    def expect(self, label, args, expected, folder, baseline):
        problem = self.outcome(args, expected, [folder], baseline)
        if problem:
            self.failures.append(f"FAIL: {label}: {' '.join(args[:1])}: {problem}")

    def outcome(self, args, expected, folders, baseline):
        """`folders`: the ones a refused command must leave as they were (the case; --init's --out too)."""
        before = [snapshot(f) for f in folders]
        code, out, seconds = self.run(args)
        kind, fragments = expected
        problem = None
        if code is None:
            problem = out
        elif code < 0:
            problem = f"killed by signal {-code}"
        elif any(s in out for s in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "terminate called")):
            problem = "sanitizer report or terminate"
        elif kind == "reject":
            if code == 0:
                problem = "accepted silently"
            elif code != 1:
                problem = f"exit {code}, expected 1"
            elif "error:" not in out:
                problem = "no error message"
            elif not any(f in out for f in fragments):
                problem = f"the error does not name the problem (wanted one of {fragments})"
            elif [snapshot(f) for f in folders] != before:
                after = [snapshot(f) for f in folders]
                problem = "the refused command changed files: " + ", ".join(
                    sorted(f"{os.path.basename(f)}/{k}" for f, x, y in zip(folders, before, after)
                           for k in set(x) | set(y) if x.get(k) != y.get(k)))
            else:
                self.count("clean_errors")
        else:
            if code != 0:
                problem = f"refused a valid file (exit {code})"
            elif baseline is not None and result_line(out) != baseline:
                problem = f"accepted with another result: {result_line(out)!r}, expected {baseline!r}"
            else:
                self.count("acceptances")
        return f"{problem}\n    {out.strip()[-400:]}" if problem else None


def result_line(out):
    lines = [l for l in out.splitlines() if l.strip() and not l.startswith("warning")]
    return re.sub(r" in [0-9.]+s;", ";", lines[-1] if lines else "")  # the training time varies


def snapshot(folder):
    files = {}
    if not os.path.isdir(folder):
        return files
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and name != ".lock":
            files[name] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return files


def make_base(imdb, args, label):
    p = subprocess.run([imdb] + args, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        print(f"FAIL: could not make the base {label}")
    return p.returncode == 0


def main():
    imdb, data = sys.argv[1], sys.argv[2]
    options = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    keep, every = options.get("--keep"), int(options.get("--every", "1"))
    work = keep or tempfile.mkdtemp(prefix="ember_hostile_")
    started = time.time()
    try:
        bases = {"train": os.path.join(work, "base"), "pretrain": os.path.join(work, "pbase"),
                 "nbsvm": os.path.join(work, "nbase")}
        for folder in bases.values():
            shutil.rmtree(folder, ignore_errors=True)
        # 13 steps an epoch: a model file at the end of epoch 1, a checkpoint one step before the end
        # (an accepted --resume trains one step, evaluates and writes the report).
        step, total = 25, 26
        # A pretraining of 6 steps holding out 20 reviews, stopped after 5 (its checkpoint and the encoder of step 5;
        # an accepted --resume trains one step and writes the final encoder), and an NBSVM.
        pre = SMALL + ["--max-len", "32", "--steps", "6", "--validation", "20"]
        pre_step, pre_total = 5, 6
        if not (make_base(imdb, ["train", "--data", data, "--out", bases["train"], "--stop-after", str(step)] + SMALL,
                          "run") and
                make_base(imdb, ["pretrain", "--data", data, "--out", bases["pretrain"], "--stop-after",
                                 str(pre_step)] + pre, "pretraining") and
                make_base(imdb, ["nbsvm", "--data", data, "--out", bases["nbsvm"], "--buckets", "4096", "--seed", "5",
                                 "--quiet"], "NBSVM")):
            return 1
        sweep = Sweep(imdb, data, work)
        resume = lambda folder: ["train", "--data", data, "--out", folder, "--resume"] + SMALL
        # Each kind of file: the run it is in, its name, and the commands that read it.
        commands = {
            "checkpoint": [lambda f: ["check", "--run", f], resume],
            "model": [lambda f: ["predict", "--run", f, "--text", "a wonderful, moving film"],
                      lambda f: ["eval", "--run", f, "--data", data]],
            # A fine-tune holding out the pretraining's 20 reviews, into a folder beside the case's.
            "encoder": [lambda f: ["train", "--data", data, "--init", f, "--out", os.path.join(os.path.dirname(f), "fine")]
                        + SMALL + ["--max-len", "32", "--validation", "20", "--epochs", "1"]],
            "pretraining checkpoint": [lambda f: ["check", "--run", f],
                                       lambda f: ["pretrain", "--data", data, "--out", f, "--resume"] + pre],
            "nbsvm": [lambda f: ["eval", "--run", f, "--data", data]],
        }
        files = {"checkpoint": ("train", "checkpoint.safetensors"), "model": ("train", "model.safetensors"),
                 "encoder": ("pretrain", "encoder.safetensors"),
                 "pretraining checkpoint": ("pretrain", "checkpoint.safetensors"),
                 "nbsvm": ("nbsvm", "nbsvm.safetensors")}
        originals = {t: read_st(os.path.join(bases[run], name)) for t, (run, name) in files.items()}
        # What the unbroken files give (in a folder named like the cases', as outputs name it).
        baselines = {}
        for target, runs in commands.items():
            for make_args in runs:
                folder = os.path.join(work, "baseline", "case")
                shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
                shutil.copytree(bases[files[target][0]], folder)
                code, out, _ = sweep.run(make_args(folder))
                if code != 0:
                    print(out)
                    print(f"FAIL: the unbroken {target} file is refused")
                    return 1
                baselines[(target, make_args(folder)[0])] = result_line(out).replace(os.path.dirname(folder), "ROOT")
        mutations = (checkpoint_mutations(step, total) + model_mutations() + encoder_mutations() +
                     pretrain_checkpoint_mutations(pre_step, pre_total) + nbsvm_mutations())[::every]
        counts = {target: 0 for target in files}
        jobs = []
        for number, (label, target, mutate, expected) in enumerate(mutations):
            meta, tensors = originals[target]
            broken = mutate(dict(meta), copy.deepcopy(tensors))
            counts[target] += 1
            for k, make_args in enumerate(commands[target]):
                folder = os.path.join(work, f"{number}-{k}", "case")
                args = make_args(folder)
                want = expected
                if label.endswith("data_fingerprint = '" + "0" * 64 + "', checksum redone") and args[0] == "check":
                    want = ACCEPT  # a consistent file: check cannot know the data, --resume refuses it
                jobs.append((label, target, broken, folder, args, want))

        def run_job(job):
            label, target, broken, folder, args, want = job
            shutil.copytree(bases[files[target][0]], folder)
            with open(os.path.join(folder, files[target][1]), "wb") as f:
                f.write(broken)
            root = os.path.dirname(folder)
            baseline = baselines[(target, args[0])].replace("ROOT", root) if want == ACCEPT else None
            # A refused command leaves the case as it was, and writes nothing into a folder beside it (--init's --out).
            problem = sweep.outcome(args, want, [folder, os.path.join(root, "fine")], baseline)
            shutil.rmtree(root, ignore_errors=True)
            return f"FAIL: {label}: {args[0]}: {problem}" if problem else None

        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            sweep.failures += [f for f in pool.map(run_job, jobs) if f]
        # vocab.txt of another vocabulary of the same size, beside an intact model file (and an intact encoder).
        for target in ("model", "encoder"):
            folder = os.path.join(work, "vocab-" + target, "case")
            shutil.copytree(bases[files[target][0]], folder)
            vocab = open(os.path.join(folder, "vocab.txt")).read().split("\n")
            vocab[5], vocab[6] = vocab[6], vocab[5]
            open(os.path.join(folder, "vocab.txt"), "w").write("\n".join(vocab))
            sweep.expect(f"{target}: vocab.txt of another vocabulary", commands[target][0](folder),
                         reject("vocab.txt is not the vocabulary"), folder, None)
        for failure in sweep.failures:
            print(failure)
        sample = f" (every {every}th of them)" if every > 1 else ""
        print(f"hostile checkpoints: {counts['checkpoint']} checkpoint, {counts['model']} model-file, "
              f"{counts['encoder']} encoder, {counts['pretraining checkpoint']} pretraining-checkpoint and "
              f"{counts['nbsvm']} NBSVM-file mutations{sample} and two swapped vocabularies, {sweep.runs} runs of "
              f"check/resume/predict/eval/--init/pretrain --resume: "
              f"{sweep.clean_errors} clean errors, {sweep.acceptances} correct acceptances, "
              f"{len(sweep.failures)} failures, {time.time() - started:.0f} s")
        return 1 if sweep.failures else 0
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
