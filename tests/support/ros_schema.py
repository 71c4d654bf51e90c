"""ROS resource property schemas read from Alibaba Cloud's published ``ros-cdk-*`` packages, offline.

Each ``ros-cdk-<product>`` wheel carries its jsii bundle (``_jsii/*.jsii.tgz``) with the generated
``lib/<product>.generated.js``: for every resource type ``RosX.ROS_RESOURCE_TYPE_NAME = "ALIYUN::..."``,
a ``rosXPropsToRosTemplate`` function that maps each property to its exact ROS name (nested structs
through their own ``...PropertyToRosTemplate`` functions), and a ``RosXPropsValidator`` that marks the
required ones (``ros.requiredValidator``). That is the same source ROS CDK renders templates from, so a
property name we invent or a required property we forget fails here without ROS. Nothing is executed:
the JavaScript is read as text. ``make test`` downloads the pinned wheels (no dependencies) into
``.cache/ros-cdk``.
"""

import glob
import io
import os
import re
import tarfile
import zipfile
from typing import Dict, List, NamedTuple, Optional, Set

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEELS = os.path.join(ROOT, ".cache", "ros-cdk")

_TYPE_NAME = re.compile(r'^(Ros\w+)\.ROS_RESOURCE_TYPE_NAME = "([A-Za-z0-9:]+)";', re.M)
_TO_TEMPLATE = re.compile(r"^function (ros\w+ToRosTemplate)\(properties[^)]*\) \{(.*?)^\}", re.M | re.S)
_ENTRY = re.compile(r"^\s*'([A-Za-z0-9]+)': (.*?)\(properties\.(\w+)\),?$", re.M)
_NESTED = re.compile(r"\b(ros[A-Z]\w*ToRosTemplate)\b")
_VALIDATOR = re.compile(r"^function (Ros\w+Validator)\(properties\) \{(.*?)^\}", re.M | re.S)
_REQUIRED = re.compile(r"ros\.propertyValidator\('(\w+)', ros\.requiredValidator\)")


class Shape(NamedTuple):
    properties: Dict[str, Optional[str]]  # ROS name -> nested shape's converter, None for a scalar/map/list
    required: Set[str]  # ROS names


class Schemas(NamedTuple):
    resources: Dict[str, str]  # "ALIYUN::FC3::Function" -> its converter ("<wheel>#<file>:<name>")
    shapes: Dict[str, Shape]  # converter -> shape
    sources: List[str]  # the wheels read


def _generated_js(wheel: str) -> List[str]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".jsii.tgz"):
                with tarfile.open(fileobj=io.BytesIO(zf.read(name))) as tar:
                    for member in tar.getmembers():
                        if member.name.endswith(".generated.js"):
                            out.append(tar.extractfile(member).read().decode("utf-8"))
    return out


def load(folder: str = WHEELS) -> Schemas:
    wheels = sorted(glob.glob(os.path.join(folder, "ros_cdk_*.whl")))
    if not wheels:
        raise FileNotFoundError("no ros-cdk wheels in %s: `make test` downloads them (make ros-schemas)" % folder)
    resources: Dict[str, str] = {}
    shapes: Dict[str, Shape] = {}
    for wheel in wheels:
        for index, js in enumerate(_generated_js(wheel)):
            # Converter names repeat across files (ALIYUN::RAM::Role and DATASOURCE::RAM::Role both have
            # rosRolePropsToRosTemplate): a shape is known by its file and its name.
            scope = "%s#%d:" % (os.path.basename(wheel), index)
            validators = {m.group(1): set(_REQUIRED.findall(m.group(2))) for m in _VALIDATOR.finditer(js)}
            for fn, body in _TO_TEMPLATE.findall(js):
                props: Dict[str, Optional[str]] = {}
                camel_to_ros: Dict[str, str] = {}
                for ros_name, converter, camel in _ENTRY.findall(body):
                    nested = _NESTED.search(converter)
                    props[ros_name] = scope + nested.group(1) if nested else None
                    camel_to_ros[camel] = ros_name
                # rosFunctionPropsToRosTemplate -> RosFunctionPropsValidator;
                # rosFunctionCodePropertyToRosTemplate -> RosFunction_CodePropertyValidator
                base = fn[len("ros"):-len("ToRosTemplate")]
                candidates = ["Ros" + base + "Validator"]
                if base.endswith("Property"):
                    candidates += ["Ros%s_%sValidator" % (base[:i], base[i:]) for i in range(1, len(base))
                                   if base[i].isupper()]
                required = next((validators[c] for c in candidates if c in validators), set())
                shapes[scope + fn] = Shape(props, {camel_to_ros[c] for c in required if c in camel_to_ros})
            for cls, type_name in _TYPE_NAME.findall(js):
                resources[type_name] = "%sros%sPropsToRosTemplate" % (scope, cls[len("Ros"):])
    return Schemas(resources, shapes, [os.path.basename(w) for w in wheels])


def _intrinsic(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in (
        "Ref", "Fn::If", "Fn::Sub", "Fn::GetAtt", "Fn::Join", "Fn::Select", "Fn::GetJsonValue", "Fn::Base64Encode")


def problems(template: dict, schemas: Schemas) -> List[str]:
    """Every property a resource of a known type must not have or lacks, as 'Resource.Path: problem'."""
    out: List[str] = []

    def check(where: str, value, converter: str) -> None:
        shape = schemas.shapes.get(converter)
        if shape is None or not isinstance(value, dict) or _intrinsic(value):
            return
        for key, item in value.items():
            if key not in shape.properties:
                out.append("%s.%s: not a property (known: %s)" % (where, key, ", ".join(sorted(shape.properties))))
            elif shape.properties[key] is not None:
                nested = shape.properties[key]
                for i, element in enumerate(item if isinstance(item, list) else [item]):
                    check("%s.%s%s" % (where, key, "[%d]" % i if isinstance(item, list) else ""), element, nested)
        for key in sorted(shape.required - set(value)):
            out.append("%s.%s: required but missing" % (where, key))

    for name, resource in (template.get("Resources") or {}).items():
        converter = schemas.resources.get(resource.get("Type"))
        if converter is None:
            out.append("%s: type %s is in no ros-cdk package read (%s)" % (name, resource.get("Type"),
                                                                           ", ".join(schemas.sources)))
            continue
        check(name, resource.get("Properties") or {}, converter)
    return out
