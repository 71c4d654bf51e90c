"""``-o json|yaml``: the machine output every command with ``--json`` has, as kubectl and helm name it.

``-o json`` is ``--json``. ``-o yaml`` is the same document as YAML: the command writes its JSON, and
:class:`YamlStream` turns each complete JSON document it receives into one YAML document (``---`` between
two, as ``status --watch`` writes one per change), so both forms always hold the same fields and values.
YAML needs PyYAML, part of the deploy extra.
"""

import json
from typing import Any, List, Optional, TextIO

from functions.commands.terminal import Wrapped

FORMATS = ("json", "yaml")


def to_yaml(document: Any) -> str:
    import yaml  # the deploy extra; main says which extra when it is missing

    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 16)


class YamlStream(Wrapped):
    """stdout for ``-o yaml``: JSON documents in, YAML documents out, each as soon as it is complete."""

    def __init__(self, stream: TextIO):
        self.stream, self._pending, self.count = stream, "", 0
        self._decoder = json.JSONDecoder()

    def write(self, text: str) -> int:
        self._pending += text
        self._emit()
        return len(text)

    def _emit(self) -> None:
        while True:
            start = len(self._pending) - len(self._pending.lstrip())
            if start == len(self._pending):
                self._pending = ""
                return
            try:
                document, end = self._decoder.raw_decode(self._pending, start)
            except ValueError:  # not complete yet (a document written in parts), or not JSON: see flush
                return
            self.stream.write(("---\n" if self.count else "") + to_yaml(document))
            self.count += 1
            self._pending = self._pending[end:]

    def flush(self) -> None:
        if self._pending.strip():  # never JSON: what a command printed as text goes out unchanged
            self.stream.write(self._pending)
            self._pending = ""
        self.stream.flush()


def wants_yaml(args: Any) -> bool:
    return getattr(args, "output", None) == "yaml"


def chosen(values: List[Optional[str]]) -> Optional[str]:
    """The one format asked for (``--json`` alone is json)."""
    return next((v for v in values if v), None)
