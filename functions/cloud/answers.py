"""The body of an Alibaba Cloud SDK answer as the API sent it, for every product whose SDK reads answers into
darabonba models (cs20151215, ros20190910): one reader, so that no caller takes a body the model did not fit
for an empty answer."""

from typing import Any, Dict

from node_bootstrap.outside import json_type

from functions.base.errors import Refused


def answer_body(response: Any, call: str) -> Dict[str, Any]:
    """The answer's body as a map of the API's own fields. The SDK reads a body into its model through
    darabonba's ``DaraCore.from_map`` (darabonba/core.py), which swallows any error there: one item of another
    shape (a node that is a string, a label list that is an object, a detail field that is text where the model
    has an object) left the whole body None, and every node or pool of the answer read as none, a stack as one
    with no status, with nothing said. The raw answer is kept in the response's ``_map`` then: it is read here
    instead, so each item is read or left out on its own (``cs_lookup._parsed``). A body that is no JSON object
    is a Refused naming the call (no retry changes what the API answers)."""
    if response.body is not None:
        return response.body.to_map() or {}
    raw = getattr(response, "_map", None)
    body = raw.get("body") if isinstance(raw, dict) else None
    if not isinstance(body, dict):
        raise Refused("%s answered %s, not the API's JSON object; nothing of it is read" % (call, json_type(body)),
                      call, "", "UnreadableAnswer")
    return body

