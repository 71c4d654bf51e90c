"""template.yml against the ROS resource schemas Alibaba Cloud publishes in its ros-cdk packages (read
offline by tests/support/ros_schema.py): every property name exists, every required one is there."""

import copy
import os

import pytest
import yaml

from tests.support import ros_schema

TEMPLATE = os.path.join(ros_schema.ROOT, "template.yml")


@pytest.fixture(scope="module")
def schemas():
    return ros_schema.load()


@pytest.fixture
def template():
    with open(TEMPLATE) as handle:
        return yaml.safe_load(handle)


def test_the_schemas_are_the_published_ones(schemas):
    function = schemas.shapes[schemas.resources["ALIYUN::FC3::Function"]]
    assert {"FunctionName", "Handler", "Runtime"} <= function.required
    assert {"Code", "Role", "Timeout", "EnvironmentVariables", "VpcConfig", "LogConfig"} <= set(function.properties)
    trigger = schemas.shapes[schemas.resources["ALIYUN::FC3::Trigger"]]
    assert {"FunctionName", "TriggerName", "TriggerType", "TriggerConfig"} <= trigger.required
    assert "RoleName" in schemas.shapes[schemas.resources["ALIYUN::RAM::Role"]].required


def test_template_matches_the_published_schemas(schemas, template):
    assert ros_schema.problems(template, schemas) == []


def function_props(template):
    return next(r for r in template["Resources"].values() if r["Type"] == "ALIYUN::FC3::Function")["Properties"]


def test_a_misspelled_or_missing_property_is_caught(schemas, template):
    bad = copy.deepcopy(template)
    props = function_props(bad)
    props["Runtim"] = props.pop("Runtime")
    props["Code"]["OssBucket"] = props["Code"].pop("OssBucketName")
    found = ros_schema.problems(bad, schemas)
    assert any(p.startswith("Function.Runtim: not a property") for p in found), found
    assert any("Function.Runtime: required but missing" in p for p in found), found
    assert any(p.startswith("Function.Code.OssBucket: not a property") for p in found), found


def test_an_unknown_resource_type_is_reported(schemas, template):
    bad = copy.deepcopy(template)
    bad["Resources"]["Extra"] = {"Type": "ALIYUN::NoSuch::Thing", "Properties": {}}
    assert any(p.startswith("Extra: type ALIYUN::NoSuch::Thing") for p in ros_schema.problems(bad, schemas))


def test_the_saved_searches_and_alerts_validate_against_the_published_ros_schema(schemas, template):
    """The stack's SLS saved searches and alert rules (docs/operations.md, Signals) alone: ros-cdk-sls 1.15.0 has
    both types, and a required property left out (an alert's Dashboard) is caught."""
    import json

    doc = template
    kinds = ("ALIYUN::SLS::Savedsearch", "ALIYUN::SLS::Alert")
    assert all(k in schemas.resources for k in kinds)
    only = dict(doc, Resources={k: r for k, r in doc["Resources"].items() if r["Type"] in kinds})
    assert len(only["Resources"]) == 8 and ros_schema.problems(only, schemas) == []
    broken = json.loads(json.dumps(only))
    broken["Resources"]["NoRunAlert"]["Properties"]["Detail"]["Configuration"].pop("Dashboard")
    assert any("Dashboard: required but missing" in p for p in ros_schema.problems(broken, schemas))
