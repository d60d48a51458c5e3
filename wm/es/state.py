"""The optimiser's checkpoint as arrays and plain values (`controller/es_state.npz`), never a pickle.

Reading a run directory must never run code, and unpickling runs whatever the file names. So the checkpoint is a
tree of dicts (str keys), lists, tuples, None, bools, ints, floats, strings, NumPy scalars and NumPy arrays, and
`save` writes it as one `.npz`: each array an entry of its own (`a0`, `a1`, …), the tree around them JSON in the
entry `state` (a 0-d unicode array). `load` reads it with `np.load(..., allow_pickle=False)`, so no byte of the
file can name a class or a function. The JSON lives inside the `.npz`, not in a sidecar, so the arrays and the
values that go with them are replaced together by one atomic rename: a kill can never leave a new tree next to old
arrays. Python floats round-trip exactly through JSON (`repr`), NaN and ±inf as JSON's `NaN`/`Infinity`; a NumPy
scalar keeps its dtype; an array keeps dtype, shape and memory order (`np.lib.format`).

pycma's `CMAEvolutionStrategy` is no such tree: it is a graph of pycma objects. `dump_object` turns it into one
(every attribute of every pycma object, recursively; shared objects and arrays as references, so the aliasing
pycma relies on, e.g. `es.D is es.sm.D`, comes back) and `load_object` writes that tree back **onto a freshly
constructed object** of the same configuration: the loader never creates an object of a class the file names, it
only fills in the attributes of the objects the constructor made, after checking each one's class. What is not
stored comes from that fresh object: `FIXED` names it (the options, the logger, functions, and the sampler's
generator, whose state the wrapper stores itself), and `SKIP` the one attribute left out (a wall-clock timer).
An array is stored by value, so a view of another comes back as a copy: pycma's one (`es.dC`, the diagonal of
`es.sm.C`) is set anew from `sm.C` in every `ask` before anything reads it, so the next generation is the same.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.errors import WMError

FORMAT = "wm-es-state"
FORMAT_VERSION = 1

# NumPy scalar types a checkpoint may hold (each one exact as a Python int/float/bool in JSON)
SCALARS = {
    t.__name__: t
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
}


class StateError(ValueError):
    """A checkpoint that cannot be written or read back as plain values (the message names what and where)."""


# ---------------------------------------------------------------- plain trees <-> one .npz


def _encode(x: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    if x is None or isinstance(x, (bool, str)) or type(x) in (int, float):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise StateError(f"{where}: an object array")
        key = f"a{len(arrays)}"
        arrays[key] = x
        return {"a": key}
    if type(x) in SCALARS.values():
        return {"s": [type(x).__name__, x.item()]}
    if isinstance(x, tuple):
        return {"t": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(x)]}
    if isinstance(x, list):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise StateError(f"{where}: a dict with keys other than strings")
        return {"d": {k: _encode(v, arrays, f"{where}.{k}") for k, v in x.items()}}
    raise StateError(f"{where}: a {type(x).__module__}.{type(x).__qualname__} is no plain value")


def _decode(x: Any, arrays: Any, where: str) -> Any:
    if x is None or isinstance(x, (bool, str, int, float)):
        return x
    if isinstance(x, list):
        return [_decode(v, arrays, where) for v in x]
    if isinstance(x, dict) and len(x) == 1:
        ((tag, v),) = x.items()
        if tag == "a" and isinstance(v, str) and v in arrays:
            return arrays[v]
        if tag == "s" and isinstance(v, list) and len(v) == 2 and v[0] in SCALARS:
            return SCALARS[v[0]](v[1])
        if tag == "t" and isinstance(v, list):
            return tuple(_decode(e, arrays, where) for e in v)
        if tag == "d" and isinstance(v, dict):
            return {k: _decode(e, arrays, where) for k, e in v.items()}
    raise StateError(f"{where}: not a checkpoint node: {json.dumps(x)[:80]}")


def save(path: str | os.PathLike[str], tree: dict[str, Any]) -> None:
    """Write `tree` (plain values and arrays) to `path` atomically (a temporary name, then a rename)."""
    arrays: dict[str, np.ndarray] = {}
    body = {"format": FORMAT, "version": FORMAT_VERSION, "tree": _encode(tree, arrays, "state")}
    text = json.dumps(body, allow_nan=True, separators=(",", ":"))
    # uncompressed: a full covariance of n ≈ 1000 is 8 MB of noise deflate cannot shrink, rewritten every generation
    atomic_savez(path, compressed=False, state=np.array(text), **arrays)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tree `save` wrote; `StateError` (or NumPy's/zipfile's error) for a file that is not one."""
    with np.load(path, allow_pickle=False) as f:
        if "state" not in f.files:
            raise StateError("no 'state' entry")
        meta = f["state"]
        if meta.shape != () or meta.dtype.kind != "U":
            raise StateError("the 'state' entry is not a string")
        body = json.loads(str(meta[()]))
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise StateError(f"not a {FORMAT} file")
        if body.get("version") != FORMAT_VERSION:
            raise StateError(f"format version {body.get('version')!r}, this code reads {FORMAT_VERSION}")
        arrays = {k: f[k] for k in f.files if k != "state"}
    return _decode(body["tree"], arrays, "state")


# ---------------------------------------------------------------- pycma's object graph <-> a plain tree

# What the constructor makes and the optimisation never changes, named rather than stored: wherever the graph
# reaches one of these (e.g. `adapt_sigma._es_opts` is `opts`, `sm.randn` is `opts["randn"]`) the tree says
# {"fixed": name} and `load_object` puts the fresh object's own there. The options are checked by the wrapper.
FIXED: dict[str, Any] = {
    "opts": lambda es: es.opts,  # CMAOptions, with functions and classes among its values
    "randn": lambda es: es.opts["randn"],  # the sampler's generator: the wrapper stores its state
    "eigenmethod": lambda es: es.opts["CMA_eigenmethod"],  # np.linalg.eigh
    "integer_centering": lambda es: es.integer_centering,  # a function (a no-op without integer variables)
    "logger": lambda es: es.logger,  # CMADataLogger: writes nothing here (verb_log 0), refers back to `es`
}
# Attributes of pycma objects that are not stored at all (the fresh object's stay): wall-clock time only, which
# nothing of ask/tell reads (pycma starts a timer in ask when there is none).
SKIP = frozenset({"timer"})


def _qualname(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _is_pycma(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "cma" and hasattr(obj, "__dict__")


def dump_object(root: Any) -> dict[str, Any]:
    """pycma object `root` as a plain tree.

    A pycma object is {"object": class, "id": n, "attrs": {name: node}} (with "items" for a list or dict subclass),
    a list {"list": [...], "id": n}, a dict {"dict": [[key, value], ...], "id": n} (keys may be tuples), a tuple
    {"tuple": [...]}, an array {"array": a copy, "id": n}, a second sight of the same list/dict/array/object
    {"ref": n}, one of `FIXED` {"fixed": name}; scalars are themselves. A value of any other type (a function, an
    object of another library) is a StateError naming where it is."""
    memo: dict[int, int] = {}
    keep: list[Any] = []  # everything memoised stays alive, so no id() is reused during the walk
    fixed = {id(get(root)): name for name, get in FIXED.items()}

    def ref(x: Any) -> dict[str, int] | None:
        if id(x) in memo:
            return {"ref": memo[id(x)]}
        memo[id(x)] = len(memo)
        keep.append(x)
        return None

    def walk(x: Any, where: str) -> Any:
        if x is None or isinstance(x, (bool, str)) or type(x) in (int, float) or type(x) in SCALARS.values():
            return x
        if isinstance(x, tuple) and type(x) is tuple:
            return {"tuple": [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if id(x) in fixed:
            return {"fixed": fixed[id(x)]}
        seen = ref(x)
        if seen is not None:
            return seen
        n = memo[id(x)]
        if isinstance(x, np.ndarray) and type(x) is np.ndarray:
            return {"array": x.copy(order="K"), "id": n}  # a snapshot: pycma may change an array in place later
        if type(x) is list:
            return {"list": [walk(v, f"{where}[{i}]") for i, v in enumerate(x)], "id": n}
        if type(x) is dict:
            return {"dict": [[walk(k, f"{where} key"), walk(v, f"{where}[{k!r}]")] for k, v in x.items()], "id": n}
        if _is_pycma(x):
            node: dict[str, Any] = {"object": _qualname(x), "id": n}
            if isinstance(x, list):
                node["items"] = [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
            elif isinstance(x, dict):
                node["items"] = [[walk(k, f"{where} key"), walk(v, f"{where}[{k!r}]")] for k, v in x.items()]
            node["attrs"] = {k: walk(v, f"{where}.{k}") for k, v in vars(x).items() if k not in SKIP}
            return node
        raise StateError(f"{where}: a {_qualname(x)} cannot be stored as plain values")

    return walk(root, type(root).__name__)


# Kept whole: one recursive reader over dump_object's node kinds, its closures sharing the memo and `fresh`.
def load_object(tree: dict[str, Any], fresh: Any) -> Any:
    """Write `dump_object`'s tree onto `fresh`, a freshly constructed object of the same configuration, and return it.

    Every pycma object of the tree must be there in `fresh`, at the same place and of the same class: its
    attributes are replaced (those the tree does not have are deleted, `SKIP` kept). No object of a class the tree
    names is ever created. StateError on any mismatch (another pycma version, another configuration, a file
    edited by hand)."""
    memo: dict[int, Any] = {}
    targets: set[int] = set()
    missing = object()

    def remember(node: dict[str, Any], value: Any) -> Any:
        n = node.get("id")
        if not isinstance(n, int) or n in memo:
            raise StateError(f"a node id {n!r} out of order")
        memo[n] = value
        return value

    def pairs(items: Any, where: str, fresh_map: Any) -> list[tuple[Any, Any]]:
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2 for p in items):
            raise StateError(f"{where}: not a list of key-value pairs")
        out = []
        for k, v in items:
            key = build(k, f"{where} key", missing)
            try:
                hash(key)
            except TypeError:
                raise StateError(f"{where}: an unhashable key") from None
            sub = fresh_map.get(key, missing) if isinstance(fresh_map, dict) else missing
            out.append((key, build(v, f"{where}[{key!r}]", sub)))
        return out

    def elements(items: Any, where: str, fresh_seq: Any) -> list[Any]:
        if not isinstance(items, list):
            raise StateError(f"{where}: not a list")
        same = isinstance(fresh_seq, (list, tuple)) and len(fresh_seq) == len(items)
        return [build(v, f"{where}[{i}]", fresh_seq[i] if same else missing) for i, v in enumerate(items)]

    def build(node: Any, where: str, fresh_here: Any) -> Any:
        if node is None or isinstance(node, (bool, str, int, float)) or type(node) in SCALARS.values():
            return node
        if not isinstance(node, dict):
            raise StateError(f"{where}: not a node")
        if "ref" in node:
            if node["ref"] not in memo:
                raise StateError(f"{where}: a reference to nothing")
            return memo[node["ref"]]
        if "fixed" in node:
            if node["fixed"] not in FIXED:
                raise StateError(f"{where}: an unknown fixed part {node['fixed']!r}")
            return FIXED[node["fixed"]](fresh)
        if "tuple" in node:
            return tuple(elements(node["tuple"], where, fresh_here))
        if "array" in node:
            if not isinstance(node["array"], np.ndarray):
                raise StateError(f"{where}: not an array")
            return remember(node, node["array"])
        if "list" in node:
            out: list[Any] = remember(node, [])
            out.extend(elements(node["list"], where, fresh_here))
            return out
        if "dict" in node:
            d: dict[Any, Any] = remember(node, {})
            d.update(pairs(node["dict"], where, fresh_here))
            return d
        if "object" in node:
            if fresh_here is missing or _qualname(fresh_here) != node["object"]:
                got = "nothing" if fresh_here is missing else _qualname(fresh_here)
                raise StateError(f"{where}: the checkpoint holds a {node['object']}, this pycma builds {got}")
            if id(fresh_here) in targets:
                raise StateError(f"{where}: two objects of the checkpoint are one in this pycma")
            targets.add(id(fresh_here))
            target = remember(node, fresh_here)
            attrs = node.get("attrs")
            if not isinstance(attrs, dict):
                raise StateError(f"{where}: no attributes")
            if isinstance(target, list):  # a list subclass: its items, bypassing any override
                items = elements(node.get("items"), where, list(target))
                list.clear(target)
                list.extend(target, items)
            elif isinstance(target, dict):
                items = pairs(node.get("items"), where, dict(target))
                dict.clear(target)
                dict.update(target, items)
            own = vars(target)
            for k in [k for k in own if k not in attrs and k not in SKIP]:
                del own[k]
            for k, v in attrs.items():
                if k in SKIP:
                    raise StateError(f"{where}.{k}: an attribute that is never stored")
                own[k] = build(v, f"{where}.{k}", own.get(k, missing))
            return target
        raise StateError(f"{where}: an unknown node {sorted(node)}")

    return build(tree, type(fresh).__name__, fresh)


def generator(state: Any, where: str) -> np.random.Generator:
    """A NumPy Generator in the state `bit_generator.state` gave (PCG64, NumPy's default, the only one used here)."""
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise StateError(f"{where}: not a PCG64 generator state")
    g = np.random.default_rng()
    try:
        g.bit_generator.state = state
    except (TypeError, ValueError, KeyError) as e:
        raise StateError(f"{where}: {e}") from None
    return g


def read_error(path: Any, e: BaseException) -> WMError:
    """The one line for a checkpoint that does not read back."""
    what = str(e) if isinstance(e, StateError) else type(e).__name__
    return WMError(f"{path}: unreadable checkpoint ({what}); rerun with --force to start afresh")
