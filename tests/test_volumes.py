"""The host-path gate's coverage rule (reference §7.2) and claim placement, on their own."""

from __future__ import annotations

from functions.handlers.instance.volumes import HostMount, placement
from functions.views import DictView, View


def test_a_held_mount_covers_the_same_path_at_the_same_or_a_deeper_sub_path():
    held = HostMount("/var/lib/cache", "DirectoryOrCreate", "safe", read_only=False)
    assert held.covers(HostMount("/var/lib/cache", "DirectoryOrCreate", "safe", False))
    assert held.covers(HostMount("/var/lib/cache/", "DirectoryOrCreate", "safe/deeper", True))
    assert not held.covers(HostMount("/var/lib/cache", "DirectoryOrCreate", "safer", False))
    assert not held.covers(HostMount("/var/lib/other", "DirectoryOrCreate", "safe", False))
    assert not held.covers(HostMount("/var/lib/cache", "Directory", "safe", False))


def test_read_only_covers_only_read_only_and_no_sub_path_covers_all():
    read_only = HostMount("/data", "", "", read_only=True)
    assert read_only.covers(HostMount("/data", "", "x/y", True))
    assert not read_only.covers(HostMount("/data", "", "x", False))


def view(obj: dict) -> View:
    return DictView(obj)


def claim(name: str, phase: str, volume: str = "", storage_class: str = "") -> View:
    spec = {"volumeName": volume} if volume else {}
    if storage_class:
        spec["storageClassName"] = storage_class
    return view({"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}})


def local_volume(name: str, node: str, modes=("ReadWriteOnce",)) -> View:
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]
    }
    return view(
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": list(modes),
                "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
            },
        }
    )


WANTED = [("spec.volume.persistent", "work")]


def test_a_bound_local_volume_pins_and_a_shared_one_does_not():
    assert (
        placement(WANTED, [claim("work", "Bound", "pv-1")], [local_volume("pv-1", "n1")], []).node
        == "n1"
    )
    shared = local_volume("pv-1", "n1", ("ReadWriteMany",))
    assert placement(WANTED, [claim("work", "Bound", "pv-1")], [shared], []).node is None


def test_an_unbound_claim_waits_unless_its_class_binds_with_the_first_consumer():
    assert "is not bound yet" in placement(WANTED, [claim("work", "Pending")], [], []).waiting
    wffc = view({"metadata": {"name": "local"}, "volumeBindingMode": "WaitForFirstConsumer"})
    assert (
        placement(WANTED, [claim("work", "Pending", storage_class="local")], [], [wffc]).waiting
        == ""
    )
    assert (
        placement(WANTED, [], [], []).waiting
        == "spec.volume.persistent: persistent volume claim work does not exist yet"
    )
