"""The one rule for a record the API server refuses for a cause of the node's own (functions/rollout/record_end.py):
the end without its reason, else the removal. Its comment said the end is never longer than the record it
replaces, so a size limit always lets it through; it can be longer, which is why the removal is there."""

import dataclasses

import pytest

from functions.decision import waves as rp
from functions.rollout.record_end import end_or_remove, removal
from node_bootstrap.kube import KubeError


def test_the_end_without_its_reason_can_be_longer_than_the_record_it_replaces():
    # a record an older version (or a hand) wrote: no owner, expires 0, the opt-out this hook set
    old = rp.Progress("per-gpu=3g.20gb-3g.20gb", rp.APPLYING, False, 900.0, "", "", 0.0, drain=False,
                      autoscaler=True)
    end = dataclasses.replace(old, step=rp.DONE, reason="", owner="a1b2c3d4e5f6", expires=1765000000.125,
                              autoscaler=False)
    assert len(end.to_annotation()) > len(old.to_annotation())


def test_a_refused_end_is_a_removal_with_the_cordon_and_the_opt_out_and_any_other_error_propagates():
    calls = []

    def refuse():
        calls.append("end")
        raise KubeError("metadata.annotations: Too long", 422)

    assert end_or_remove(refuse, lambda: calls.append("remove"), lambda e: e.status == 422) is True
    assert calls == ["end", "remove"]
    assert end_or_remove(lambda: calls.append("end"), lambda: calls.append("remove"), lambda e: True) is False
    assert calls == ["end", "remove", "end"]
    with pytest.raises(KubeError):  # not the node's own cause (no answer): nothing removed
        end_or_remove(lambda: (_ for _ in ()).throw(KubeError("no answer", None)), lambda: calls.append("remove"),
                      lambda e: e.status == 422)
    assert calls == ["end", "remove", "end"]
    cordoned = rp.Progress("t", rp.CORDONED, True, 1.0, "", "o", 2.0, autoscaler=True)
    assert removal(cordoned) == ({"unschedulable": None}, {rp.SCALE_DOWN_DISABLED: None})
    assert removal(dataclasses.replace(cordoned, cordoned=False, autoscaler=False)) == (None, None)
    assert removal(None) == (None, None)
