"""The official SDK models as the judge of what the product sends and reads, and of what the emulators answer.

The product calls ECS and Auto Scaling through ``aliyunsdkcore``'s ``CommonRequest`` with hand-written
parameter names (functions/cloud/rpc.py), so nothing but a test ties those names to the API. The
reference here is Alibaba's own generated code, read at run time (never copied):

* requests: the Tea client's ``<action>_with_options`` method (e.g. ``alibabacloud_ecs20140526/client.py``
  ``run_command_with_options``) lists every parameter the official SDK puts on the wire, ``query['InstanceId'] =
  request.instance_id``, its action and version (``Params(action='RunCommand', version='2014-05-26')``) and
  which are serialized as JSON (``Utils.array_to_string_with_specified_style(..., 'json')``, the
  ``*_shrink`` fields). The request model (``models/_run_command_request.py``: ``RunCommandRequest.__init__``)
  gives each field's type and, in its generated comments, "This parameter is required." and "will soon be
  deprecated" / "will be taken offline". A list field goes on the wire as ``Name.1 .. Name.N``
  (``alibabacloud_tea_openapi`` ``Utils.query``: ``_object_handler`` numbers list items from 1).
* answers: the response body model (``models/_describe_invocation_results_response_body.py``) and its
  nested models; ``from_map`` names each wire field (``m.get('InvocationResults')``), ``__init__``'s type
  hints its type. An emulator's answer may carry only those fields, with those types; a field the
  product reads must exist there.

Common RPC parameters (``Action``, ``Version``, ``Format``, ``AccessKeyId``, ``SecurityToken``,
``Signature*``, ``Timestamp``) are the protocol's, not the action's, and are not checked here (the
emulators verify the signature).
"""

import importlib
import inspect
import json
import re
import sys
import typing
import weakref
from functools import lru_cache
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

# (product, version) -> the Tea SDK package whose models define that API version.
SDKS = {("ecs", "2014-05-26"): "alibabacloud_ecs20140526", ("ess", "2022-02-22"): "alibabacloud_ess20220222",
        ("cs", "2015-12-15"): "alibabacloud_cs20151215", ("kms", "2016-01-20"): "alibabacloud_kms20160120",
        ("ros", "2019-09-10"): "alibabacloud_ros20190910", ("sts", "2015-04-01"): "alibabacloud_sts20150401",
        ("vpc", "2016-04-28"): "alibabacloud_vpc20160428"}
BY_VERSION = {version: product for product, version in SDKS}
COMMON = {"Action", "Version", "Format", "AccessKeyId", "SecurityToken", "SignatureMethod", "SignatureVersion",
          "SignatureNonce", "SignatureType", "Timestamp", "Signature"}
BOOLEANS = ("true", "false", "True", "False")  # the core SDK's CommonRequest sends lower case, Tea str(bool)
_INDEXED = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\.([0-9]+)(?:\.([A-Za-z][A-Za-z0-9]*))?$")


class Exchange(NamedTuple):
    """One request an emulator received over the wire and its answer. ``params`` None: not checked (the
    Tea SDKs build ROA requests from their own models, so only their answers are)."""
    product: str
    version: str
    action: str
    params: Optional[Dict[str, str]]
    status: int
    answer: Any


_EMULATORS: "weakref.WeakSet" = weakref.WeakSet()  # every emulator with an ``exchanges`` list
_SEEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def register(emulator: Any) -> None:
    """Called by each emulator's constructor: its ``exchanges`` are checked after every test."""
    _EMULATORS.add(emulator)
    _SEEN[emulator] = 0


def new_exchanges() -> List[Exchange]:
    """The exchanges recorded since the last call, over every live emulator."""
    out: List[Exchange] = []
    for emulator in list(_EMULATORS):
        records = list(emulator.exchanges)
        out.extend(records[_SEEN.get(emulator, 0):])
        _SEEN[emulator] = len(records)
    return out


def check_exchanges(exchanges: Iterable[Exchange]) -> List[str]:
    out: List[str] = []
    for ex in exchanges:
        found = check_request(ex.product, ex.version, ex.action, ex.params) if ex.params is not None else []
        if ex.status == 200 and (ex.product, ex.version) in SDKS:
            found += ["answer of the emulator: %s" % p for p in check_answer(ex.product, ex.version, ex.action,
                                                                               ex.answer)]
        out.extend(p for p in found if p not in out)
    return out


class Param(NamedTuple):
    wire: str
    kind: str  # str, int, float, bool, list (of scalars), models (list of objects), json, object
    item: Any  # a list's item type / a model class
    required: bool
    deprecated: bool


class Action(NamedTuple):
    name: str
    version: str
    params: Dict[str, Param]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _module(product: str, version: str):
    package = SDKS.get((product, version))
    if package is None:
        return None
    return importlib.import_module(package + ".client"), importlib.import_module(package + ".models")


def _hints(cls) -> Dict[str, Any]:
    return typing.get_type_hints(cls.__init__, vars(sys.modules[cls.__module__]))


def _comments(cls) -> Dict[str, str]:
    """Each field's generated comment block in the model's ``__init__``."""
    out, block = {}, []
    for line in inspect.getsource(cls.__init__).splitlines():
        text = line.strip()
        if text.startswith("#"):
            block.append(text.lstrip("# "))
            continue
        m = re.match(r"self\.(\w+) = \w+$", text)
        if m:
            out[m.group(1)] = " ".join(block)
        block = []
    return out


def _kind(hint: Any) -> Tuple[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, List):
        item = args[0] if args else str
        return ("models" if inspect.isclass(item) and hasattr(item, "from_map") else "list"), item
    if origin in (dict, Dict):
        return "json", None
    if hint is bool:
        return "bool", None
    if hint is int:
        return "int", None
    if hint is float:
        return "float", None
    if inspect.isclass(hint) and hasattr(hint, "from_map"):
        return "object", hint
    return "str", None


@lru_cache(maxsize=None)
def action(product: str, version: str, name: str) -> Optional[Action]:
    """What the official SDK sends for ``name``; None when the SDK does not know the action."""
    loaded = _module(product, version)
    if loaded is None:
        return None
    client, models = loaded
    method = getattr(client.Client, _snake(name) + "_with_options", None)
    request_cls = getattr(models, name + "Request", None)
    if method is None or request_cls is None:
        return None
    source = inspect.getsource(method)
    sdk_version = re.search(r"version = '([^']+)'", source).group(1)
    hints, notes = _hints(request_cls), _comments(request_cls)
    shrunk = {m.group(1): m.group(3) for m in re.finditer(
        r"request\.(\w+)_shrink = Utils\.array_to_string_with_specified_style\(tmp_req\.(\w+), '[^']*', '(\w+)'\)",
        source)}
    params = {}
    for wire, attr in re.findall(r"(?:query|body)\['(\w+)'\] = request\.(\w+)", source):
        field = attr[:-len("_shrink")] if attr.endswith("_shrink") else attr
        kind, item = ("json", None) if field in shrunk else _kind(hints.get(field, str))
        note = notes.get(field, "")
        params[wire] = Param(wire, kind, item, "This parameter is required." in note,
                             bool(re.search(r"deprecated|taken offline|will be removed", note, re.I)))
    return Action(name, sdk_version, params)


def _value_problem(kind: str, value: str) -> Optional[str]:
    if kind == "bool" and value not in BOOLEANS:
        return "is not a boolean"
    if kind == "int" and not re.match(r"^-?[0-9]+$", value):
        return "is not an integer"
    if kind == "float" and not re.match(r"^-?[0-9]+(\.[0-9]+)?$", value):
        return "is not a number"
    if kind == "json":
        try:
            json.loads(value)
        except ValueError:
            return "is not JSON"
    return None


def check_request(product: str, version: str, name: str, params: Dict[str, str]) -> List[str]:
    """Every way ``params`` (one RPC request as it reached the server) differs from the SDK's model."""
    if (product, version) not in SDKS:
        return ["%s: no official SDK model for %s version %s" % (name, product, version)]
    spec = action(product, version, name)
    if spec is None:
        return ["%s: not an action of %s %s (%s)" % (name, product, version, SDKS[product, version])]
    problems, lists = [], {}
    for key, value in params.items():
        if key in COMMON:
            continue
        param = spec.params.get(key)
        if param is not None:
            if param.kind in ("list", "models"):
                problems.append("%s: %s is a list; send %s.1 .. %s.N" % (name, key, key, key))
            elif param.deprecated:
                problems.append("%s: %s is deprecated in the SDK model" % (name, key))
            else:
                bad = _value_problem(param.kind, value)
                if bad:
                    problems.append("%s: %s=%r %s (%s in the SDK model)" % (name, key, value[:40], bad, param.kind))
            continue
        m = _INDEXED.match(key)
        param = spec.params.get(m.group(1)) if m else None
        if param is None or param.kind not in ("list", "models"):
            shown = "%s.N" % m.group(1) if m else key  # one line for InstanceId.1 .. InstanceId.100
            problem = "%s: %s is not a parameter of the SDK model" % (name, shown)
            if problem not in problems:
                problems.append(problem)
            continue
        lists.setdefault(param.wire, set()).add(int(m.group(2)))
        if param.kind == "list" and m.group(3):
            problems.append("%s: %s: %s holds plain values, not objects" % (name, key, param.wire))
        elif param.kind == "models" and not m.group(3):
            problems.append("%s: %s: %s holds objects; send %s.N.<Field>" % (name, key, param.wire, param.wire))
    for wire, indexes in lists.items():
        if sorted(indexes) != list(range(1, len(indexes) + 1)):
            problems.append("%s: %s.N must be numbered 1..N without gaps, got %s" % (name, wire, sorted(indexes)))
    for param in spec.params.values():
        sent = param.wire in params or param.wire in lists
        if param.required and not sent:
            problems.append("%s: %s is required by the SDK model" % (name, param.wire))
    return problems


# ---- answers ----

@lru_cache(maxsize=None)
def fields(model) -> Dict[str, Tuple[str, Any]]:
    """A model's wire fields: name -> (kind, item or nested model), from ``from_map`` and the type hints."""
    hints, out = _hints(model), {}
    source = inspect.getsource(model.from_map)
    for chunk in source.split("if m.get('")[1:]:
        wire = chunk.split("'", 1)[0]
        attr = re.search(r"self\.(\w+)", chunk)
        if attr:
            out[wire] = _kind(hints.get(attr.group(1), str))
    return out


def body_model(product: str, version: str, name: str):
    loaded = _module(product, version)
    return getattr(loaded[1], name + "ResponseBody", None) if loaded else None


def _type_problem(kind: str, value: Any) -> Optional[str]:
    if value is None:
        return None  # null: the SDK's from_map leaves the field unset
    ok = {"str": isinstance(value, str), "bool": isinstance(value, bool),
          "int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "json": isinstance(value, dict), "object": isinstance(value, dict),
          "list": isinstance(value, list), "models": isinstance(value, list)}[kind]
    return None if ok else "is %s, the SDK model has %s" % (type(value).__name__, kind)


def check_answer(product: str, version: str, name: str, body: Any) -> List[str]:
    """Every field of ``body`` the response model lacks, or carries with another type."""
    model = body_model(product, version, name)
    if model is None:
        return ["%s: no response model in %s" % (name, SDKS.get((product, version)))]
    problems: List[str] = []

    def walk(value: Any, model: Any, path: str) -> None:
        if not isinstance(value, dict):
            problems.append("%s: %s is %s, the SDK model has an object" % (name, path or "the body",
                                                                           type(value).__name__))
            return
        known = fields(model)
        for key, item in value.items():
            where = "%s.%s" % (path, key) if path else key
            if key not in known:
                problems.append("%s: %s is not in the SDK model %s" % (name, where, model.__name__))
                continue
            kind, sub = known[key]
            bad = _type_problem(kind, item)
            if bad:
                problems.append("%s: %s %s" % (name, where, bad))
            elif kind == "object" and item is not None:
                walk(item, sub, where)
            elif kind == "models" and item is not None:
                for n, element in enumerate(item):
                    walk(element, sub, "%s[%d]" % (where, n))
            elif kind == "list" and item is not None:
                for n, element in enumerate(item):
                    bad = _type_problem(_kind(sub)[0], element)
                    if bad:
                        problems.append("%s: %s[%d] %s" % (name, where, n, bad))

    walk(body, model, "")
    return problems


def check_read(product: str, version: str, name: str, path: Tuple[str, ...]) -> Optional[str]:
    """None when the field the product read (``("Invocation", "InvocationResults", "InvocationResult",
    "[]", "InstanceId")``) exists in the response model, else the problem."""
    model = body_model(product, version, name)
    if model is None:
        return "%s: no response model in %s" % (name, SDKS.get((product, version)))
    current: Any = model
    for step, key in enumerate(path):
        if key == "[]":
            continue
        known = fields(current) if current is not None and hasattr(current, "from_map") else {}
        if key not in known:
            return "%s: the product reads %s, which is not in the SDK model" % (name, ".".join(path[:step + 1]))
        kind, sub = known[key]
        current = sub if kind in ("object", "models") else None
    return None


class Tracked(dict):
    """An answer that notes which fields the product reads (``get`` / ``[]``), lists included."""

    def __init__(self, data: Dict[str, Any], path: Tuple[str, ...], reads: Set[Tuple[str, ...]]) -> None:
        super().__init__({k: _track(v, path + (k,), reads) for k, v in data.items()})
        self._path, self._reads = path, reads

    def get(self, key: Any, default: Any = None) -> Any:
        self._reads.add(self._path + (key,))
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._reads.add(self._path + (key,))
        return super().__getitem__(key)


def _track(value: Any, path: Tuple[str, ...], reads: Set[Tuple[str, ...]]) -> Any:
    if isinstance(value, dict):
        return Tracked(value, path, reads)
    if isinstance(value, list):
        return [_track(v, path + ("[]",), reads) for v in value]
    return value


def track(body: Dict[str, Any], reads: Set[Tuple[str, ...]]) -> Dict[str, Any]:
    return _track(body, (), reads)


def problems_of(requests: Iterable[Tuple[str, str, str, Dict[str, str]]]) -> List[str]:
    """``check_request`` over (product, version, action, params) records, each problem once."""
    out: List[str] = []
    for product, version, name, params in requests:
        for problem in check_request(product, version, name, params):
            if problem not in out:
                out.append(problem)
    return out
