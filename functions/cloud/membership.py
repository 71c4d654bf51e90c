"""Is an instance, or a lifecycle hook, really part of a node pool's scaling group? Auto Scaling says.

An Auto Scaling event names a scaling group and instance ids side by side; nothing ties the two together
but the sender. An instance that the ACK API already lists as a node carries its own pool. One it does not
list yet (a brand-new instance, before it joins) would otherwise inherit the pool the event names, and
get the root bootstrap: so it is targeted only once ``ess:DescribeScalingInstances`` confirms it belongs to
that pool's scaling group. A lifecycle hook is answered only when ``ess:DescribeLifecycleHooks`` says it is
a hook of that scaling group. Both are checks on Auto Scaling's own records, which exist from the moment
the instance is created, before ESS or ACK tag it (a RAM tag condition cannot cover that window).

Two sources answer the same two questions:

* :class:`SnapshotMembership`: the ``--inventory`` snapshot's ``scaling_instances`` and
  ``lifecycle_hooks`` keys (functions.cloud.cluster reads them); a snapshot without them knows no members and
  no hooks, so an unlisted instance is skipped, never trusted.
* :class:`EssMembership`: the Auto Scaling API (2022-02-22, the version of the official
  ``alibabacloud_ess20220222`` models that tests/contract checks every request against) through the same
  core-SDK RPC client that delivery uses (``functions.cloud.rpc``, imported only when an event needs it).

Auto Scaling names the group of every instance it lists (``ScalingGroupId`` in each row): an instance
counts as a member only when its own row names the group the event names. A row of another group, or
one without a group, never counts, whatever the request asked for.
"""

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Set

from node_bootstrap.outside import OutsideDataError, digits, whole

from functions.base.errors import BadInventory, ConfigurationError, RetryLater

if TYPE_CHECKING:  # the SDK loads only when an event needs Auto Scaling (see EssMembership.from_settings)
    from functions.cloud.rpc import RpcClient
    from functions.base.settings import Settings

# DescribeScalingInstances takes InstanceIds.N (2022-02-22; InstanceId.N with N 1..20 in 2014-08-28, help.aliyun.com
# document 25942) and ignores ids that are not in the group without an error (the SDK model's comment). 20 per
# call: the documented limit of the older edition, which the current one does not state.
IDS_PER_CALL = 20
# PageSize: DescribeLifecycleHooks allows at most 50, DescribeScalingInstances 100 (ess20220222 models).
PAGE_SIZE = 50
MAX_PAGES = 100  # stops a server that never ends its pages


class Membership(Protocol):
    def scaling_members(self, scaling_group_id: str, instance_ids: Sequence[str]) -> Set[str]:
        """The ids among ``instance_ids`` that are instances of the scaling group."""
        ...

    def lifecycle_hook_group(self, lifecycle_hook_id: str, scaling_group_id: str) -> Optional[str]:
        """The scaling group the hook belongs to, or None when Auto Scaling does not know the hook.
        ``scaling_group_id`` is the group the event claims (sent along; the answer is what counts)."""
        ...


class SnapshotMembership:
    """The snapshot's ``{"scaling_instances": {asg: [ids]}, "lifecycle_hooks": {hook: asg}}``."""

    def __init__(self, scaling_instances: Optional[Mapping[str, Iterable[str]]] = None,
                 lifecycle_hooks: Optional[Mapping[str, str]] = None) -> None:
        self._members = {group: set(ids) for group, ids in (scaling_instances or {}).items()}
        self._hooks = dict(lifecycle_hooks or {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "inventory") -> "SnapshotMembership":
        members = data.get("scaling_instances", {})
        if not isinstance(members, dict) or not all(
                isinstance(group, str) and isinstance(ids, list) and all(isinstance(i, str) for i in ids)
                for group, ids in members.items()):
            raise BadInventory("%s: scaling_instances must map scaling group ids to lists of instance ids, "
                               "e.g. {\"asg-...\": [\"i-...\"]}" % where)
        hooks = data.get("lifecycle_hooks", {})
        if not isinstance(hooks, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in hooks.items()):
            raise BadInventory("%s: lifecycle_hooks must map lifecycle hook ids to scaling group ids, "
                               "e.g. {\"ash-...\": \"asg-...\"}" % where)
        return cls(members, hooks)

    def scaling_members(self, scaling_group_id: str, instance_ids: Sequence[str]) -> Set[str]:
        members = self._members.get(scaling_group_id, set())
        return {i for i in instance_ids if i in members}

    def lifecycle_hook_group(self, lifecycle_hook_id: str, scaling_group_id: str) -> Optional[str]:
        return self._hooks.get(lifecycle_hook_id)


def _items(body: Mapping[str, Any], outer: str, inner: str) -> List[Mapping[str, Any]]:
    """RPC JSON lists come wrapped (``{"ScalingInstances": {"ScalingInstance": [...]}}``, the 2014-08-28
    form) or bare (the 2022-02-22 form); read either, keep only objects."""
    value = body.get(outer)
    if isinstance(value, dict):
        value = value.get(inner)
    return [item for item in value or [] if isinstance(item, dict)] if isinstance(value, list) else []


def _total(body: Mapping[str, Any]) -> Optional[int]:
    value = body.get("TotalCount")
    try:  # the reader rule (node_bootstrap/outside.py): a count, as a number or its text in ASCII digits
        # (str.isdigit admits "\u00b2", which int refuses, and other scripts' digits, which it reads)
        counted = digits(value) if isinstance(value, str) else value
        return whole(value if counted is None else counted, "TotalCount", 0, 2 ** 62)
    except OutsideDataError:
        return None


class EssMembership:
    """Auto Scaling's answer, through :class:`functions.cloud.rpc.RpcClient`."""

    def __init__(self, ess: "RpcClient") -> None:
        self.ess = ess

    @classmethod
    def from_settings(cls, settings: "Settings") -> "EssMembership":
        from functions.cloud.rpc import ESS_VERSION, ApiError, Backoff, RpcClient

        try:
            ess = RpcClient("ess", ESS_VERSION, settings.region, settings.credentials, settings.delivery.ess_endpoint,
                            settings.api_timeout_s, Backoff(settings.api_max_attempts))
        except ApiError as exc:  # no credentials, no region
            raise ConfigurationError("membership check: %s" % exc) from None
        return cls(ess)

    @staticmethod
    def _pages(fetch: Callable[[Dict[str, Any]], Dict[str, Any]], outer: str, inner: str
               ) -> List[Mapping[str, Any]]:
        """Every page of one query; ``fetch`` makes the call with PageSize and PageNumber added."""
        from functions.cloud.rpc import ApiError

        out: List[Mapping[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            try:
                body = fetch({"PageSize": PAGE_SIZE, "PageNumber": page})
            except ApiError as exc:
                # Without Auto Scaling's answer nothing may be targeted: a transient failure retries the
                # event, anything else (access denied, a bad parameter) is an error the operator must see.
                raise (RetryLater if exc.retryable else ConfigurationError)("membership check: %s" % exc) from None
            items = _items(body, outer, inner)
            out.extend(items)
            total = _total(body)
            if len(items) < PAGE_SIZE or (total is not None and len(out) >= total):
                break
        return out

    def scaling_members(self, scaling_group_id: str, instance_ids: Sequence[str]) -> Set[str]:
        wanted = list(dict.fromkeys(instance_ids))
        found: Set[str] = set()
        for start in range(0, len(wanted), IDS_PER_CALL):
            chunk = wanted[start:start + IDS_PER_CALL]
            params: Dict[str, Any] = {"RegionId": self.ess.region, "ScalingGroupId": scaling_group_id}
            params.update(("InstanceIds.%d" % (n + 1), iid) for n, iid in enumerate(chunk))
            pages = self._pages(lambda paging, asked=params: self.ess.call("DescribeScalingInstances",
                                                                          dict(asked, **paging)),
                                "ScalingInstances", "ScalingInstance")
            for item in pages:
                # Ids the group does not hold are left out of the answer (not an error). Only a row that
                # names this group itself, for an id asked for, counts: being listed is not enough.
                if item.get("ScalingGroupId") == scaling_group_id and item.get("InstanceId") in chunk:
                    found.add(item["InstanceId"])
        return found

    def lifecycle_hook_group(self, lifecycle_hook_id: str, scaling_group_id: str) -> Optional[str]:
        # With LifecycleHookIds.N the service ignores ScalingGroupId (API reference): the group in the
        # answer is what decides. ScalingGroupId still goes along so RAM can match the group's ARN.
        params = {"RegionId": self.ess.region, "ScalingGroupId": scaling_group_id,
                  "LifecycleHookIds.1": lifecycle_hook_id}
        pages = self._pages(lambda paging: self.ess.call("DescribeLifecycleHooks", dict(params, **paging)),
                            "LifecycleHooks", "LifecycleHook")
        for item in pages:
            if item.get("LifecycleHookId") == lifecycle_hook_id:
                group = item.get("ScalingGroupId")
                return group if isinstance(group, str) and group else None
        return None
