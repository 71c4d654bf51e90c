"""What a value of the wrong shape is called in a one-line refusal: one helper (``node_bootstrap.outside.json_type``)
and one wording for every reader. ``functions.cloud.answers.kind`` and ``functions.kube.shapes._kind`` said the
same thing in other words ("no body", "a mapping", "a string", "a boolean"), so one answer read as an object
in one message and a mapping in the next."""

from types import SimpleNamespace

import pytest

from functions.base.errors import Refused
from functions.cloud import answers
from functions.kube import shapes
from node_bootstrap.outside import json_type

WORDS = [(None, "null"), (True, "true/false"), (3, "a number"), (1.5, "a number"), ("x", "text"),
         ([1], "a list"), ({"a": 1}, "an object")]


@pytest.mark.parametrize("value, words", WORDS)
def test_every_reader_names_a_value_in_the_same_words(value, words):
    assert json_type(value) == words
    if not isinstance(value, dict):  # an answer's body that is no JSON object
        response = SimpleNamespace(body=None, _map={"body": value})
        with pytest.raises(Refused) as refused:
            answers.answer_body(response, "DescribeClusterNodes")
        assert "DescribeClusterNodes answered %s, not the API's JSON object" % words in str(refused.value)
    if not isinstance(value, (list, type(None))):  # a Kubernetes object's list field of another shape
        assert shapes.problem({"spec": {"containers": value}}) == "spec.containers: expected a list, got %s" % words
    if not isinstance(value, (dict, type(None))):
        assert shapes.problem({"metadata": value}) == "metadata: expected an object, got %s" % words


def test_the_readers_keep_no_wording_of_their_own():
    assert not hasattr(answers, "kind") and not hasattr(shapes, "_kind")
