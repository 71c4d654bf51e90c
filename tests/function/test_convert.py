"""``ack-mig-hook convert``: mig-parted configs (the GPU Operator's format) to pool labels and back."""

import json

import pytest

from functions.commands.main import main
from functions.decision.migparted import ConvertError, from_mig_parted, render_mig_parted, to_mig_parted
from node_bootstrap.mig import PartitionSpec, find_gpu, plan
from tests.support.cli_errors import error_text

A100 = find_gpu("NVIDIA A100-SXM4-40GB")

# Shapes from NVIDIA's mig-parted examples: all-balanced per device filter, a per-GPU custom config.
DOC = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
    "all-1g.5gb.me": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb+me": 1}}],
    "all-balanced": [
        {"device-filter": ["0x20B010DE", "0x20B110DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
        {"device-filter": "0x20B510DE", "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
    "halves": [{"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
               {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}],
    "custom-config": [{"devices": [0, 1, 2, 3], "mig-enabled": False},
                      {"devices": [4], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
    "some-gpus": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.40gb": 1, "1g.5gb": 1}}],
}}


def by_config(results):
    return {(r.config, r.device_filter): (r.value or None, r.reason or None) for r in results}


def test_every_config_converts_or_is_refused_with_the_reason():
    got = by_config(from_mig_parted(DOC))
    assert got[("all-1g.5gb", ())] == ("-".join(["1g.5gb"] * 7), None)
    assert got[("all-balanced", ("0x20b010de", "0x20b110de"))] == ("3g.20gb-2g.10gb-1g.5gb-1g.5gb", None)
    assert got[("all-balanced", ("0x20b510de",))][0] == "3g.40gb-2g.20gb-1g.10gb-1g.10gb"  # A100 80GB
    assert got[("halves", ())] == ("3g.20gb-3g.20gb", None)  # the same layout on every GPU: one label
    assert "different layouts" in got[("custom-config", ())][1] and "[4]" in got[("custom-config", ())][1]
    assert "devices [0, 1] only" in got[("some-gpus", ())][1]
    assert "remove the pool's partition label" in got[("all-disabled", ())][1]
    assert "no instances" in got[("all-enabled", ())][1]
    assert "give --gpu" in got[("all-1g.5gb.me", ())][1]
    # no GPU known (no --gpu, no device filter): the syntax converts, the node's solver will judge the fit
    assert got[("too-big", ())] == ("7g.40gb-1g.5gb", None)


def test_a_device_filter_of_one_catalogue_gpu_checks_the_fit_there():
    doc = {"mig-configs": {"x": [{"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True,
                                  "mig-devices": {"7g.40gb": 1, "1g.5gb": 1}}]}}
    (r,) = from_mig_parted(doc)
    assert r.reason.startswith("on A100-SXM4-40GB: ") and "compute slices" in r.reason


def test_a_known_gpu_checks_the_layout_and_writes_me_profiles_as_ids():
    got = by_config(from_mig_parted(DOC, gpu=A100))
    assert got[("all-1g.5gb.me", ())] == ("20", None)  # NVML id of 1g.5gb+me: label values cannot hold "+"
    assert "needs 8 compute slices" in got[("too-big", ())][1]


def test_every_converted_value_is_accepted_by_the_labels_parser_on_its_gpu():
    for r in from_mig_parted(DOC, gpu=A100):
        if not r.reason and not r.device_filter:
            assert plan(PartitionSpec("sequence", r.value), A100).instances


def test_to_mig_parted_and_back_is_the_same_layout():
    doc = to_mig_parted(PartitionSpec("sequence", "9-2g.10gb-1G.5GB"), A100)
    assert doc["mig-configs"] == {"ack-3g.20gb-2g.10gb-1g.5gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}]}
    (back,) = from_mig_parted(doc, gpu=A100)
    assert back.value == "3g.20gb-2g.10gb-1g.5gb"
    size = to_mig_parted(PartitionSpec("size", "1g.5gb"), A100, "mine")
    assert size["mig-configs"]["mine"][0]["mig-devices"] == {"1g.5gb": 7}


def test_rendered_yaml_reads_back_as_the_same_document():
    yaml = pytest.importorskip("yaml")
    doc = to_mig_parted(PartitionSpec("sequence", "1g.5gb+me-3g.20gb"), A100, "odd: name #1")
    assert yaml.safe_load(render_mig_parted(doc)) == doc


@pytest.mark.parametrize("doc, fragment", [
    ({"mig-configs": []}, "not a mig-parted config"),
    ({"version": "v2", "mig-configs": {}}, "version 'v2' is not supported"),
])
def test_not_a_config_is_one_error(doc, fragment):
    with pytest.raises(ConvertError, match=fragment):
        from_mig_parted(doc)


def test_cli(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(DOC))
    assert main(["convert", "--from-mig-parted", str(path), "--config", "all-balanced"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("all-balanced [device-filter 0x20b010de,0x20b110de]: "
                      "ack.aliyun.com/gpu-partition-sequence=3g.20gb-2g.10gb-1g.5gb-1g.5gb")
    assert main(["convert", "--from-mig-parted", str(path), "--config", "custom-config"]) == 1
    assert "refused: its entries give GPUs" in capsys.readouterr().out
    assert main(["convert", "--from-mig-parted", str(path), "--config", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "ack-mig-hook: error: no config 'nope'"  # the choices follow as a hint
    assert error_text(err) == ("ack-mig-hook: error: no config 'nope'; the file has: all-1g.5gb, all-1g.5gb.me, "
                               "all-balanced, all-disabled, all-enabled, custom-config, halves, some-gpus, too-big")
    assert main(["convert", "--to-mig-parted", "3g.20gb-3g.20gb", "--gpu", "A100-SXM4-40GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mig-configs"]["ack-3g.20gb-3g.20gb"][0]["mig-devices"] == {
        "3g.20gb": 2}
    assert main(["convert", "--to-mig-parted", "3g.20gb"]) == 2
    assert "needs --gpu" in capsys.readouterr().err
    assert main(["convert", "--from-mig-parted", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


ENTRY = "{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 7}}"
# YAML anchors: 2,000 configs naming one list of 2,000 entries (4 million entries read, 32 KB of file), and one
# device filter of 10^8 items (made text entry by entry: hours, then gigabytes)
REPEATED = "e: &e %s\nl: &l [%s]\nversion: v1\nmig-configs:\n%s" % (
    ENTRY, ", ".join(["*e"] * 2000), "".join("  c%d: *l\n" % i for i in range(2000)))
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    "%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n" % ((c, c) + (p,) * 10)
    for p, c in zip("abcdefg", "bcdefgh")) + "version: v1\nmig-configs: {x: [{device-filter: *h, devices: all, " \
    "mig-enabled: true, mig-devices: {1g.5gb: 7}}]}\n"


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100000 + "]" * 100000, "nested too deeply to be a mig-parted config"),
    ("a: " + "[" * 5000 + "]" * 5000, "nested too deeply to be a mig-parted config"),
    ("x" * ((1 << 20) + 1), "larger than 1 MiB: not a mig-parted config"),
    (REPEATED, "holds more than 100000 values once its YAML aliases are expanded"),
    (LAUGHS, "holds more than 100000 values once its YAML aliases are expanded"),
], ids=["deep-json", "deep-yaml", "large", "aliases-repeated", "aliases-laughs"])
def test_a_file_that_cannot_be_a_config_is_one_usage_error(tmp_path, text, fragment):
    """Each was an internal error (exit 70), a read without end (/dev/zero), or a walk of what YAML aliases
    expand to (4 million entries converted one by one; a device filter of 10^8 items: hours)."""
    from tests.function.test_bad_files import cli

    (tmp_path / "c").write_text(text)
    done = cli("convert", "--from-mig-parted", str(tmp_path / "c"))
    assert done.returncode == 2 and done.stdout == "" and fragment in error_text(done.stderr), done.stderr


@pytest.mark.parametrize("name, shown", [("1", "1"), ("true", "true/false"), ("null", "null")])
def test_a_config_name_yaml_reads_as_no_text_is_one_usage_error(tmp_path, name, shown):
    """An unquoted 1 (or true, null) beside text names: sorting the names was an internal error, TypeError
    (exit 70), with --config too."""
    from tests.function.test_bad_files import cli

    entry = "[{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 7}}]"
    (tmp_path / "c.yaml").write_text("version: v1\nmig-configs:\n  %s: %s\n  all-1g.5gb: %s\n" % (name, entry, entry))
    for extra in ((), ("--config", "all-1g.5gb")):
        done = cli("convert", "--from-mig-parted", str(tmp_path / "c.yaml"), *extra)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert error_text(done.stderr) == ("ack-mig-hook: error: mig-configs: a config name is %s, not text; write "
                                           "such a name in quotes ('1': [...])" % shown)


def test_a_count_no_gpu_holds_or_an_expanded_value_is_refused_in_a_few_words():
    """10^26 instances of a profile made a list of that many names (memory without end); a value YAML anchors
    expand to 10^8 items was printed whole in the refusal (522 MB from a 600-byte file)."""
    import yaml

    huge = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                   "mig-devices": {"1g.5gb": 10 ** 26}}]}}
    (refused,) = from_mig_parted(huge)
    assert refused.reason == "mig-devices '1g.5gb': count 100000000000000000000000000 is more than a GPU holds (at " \
        "most 7)"
    laughs = yaml.safe_load("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        "%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n" % ((c, c) + (p,) * 10)
        for p, c in zip("abcdefg", "bcdefgh")) + "version: v1\nmig-configs: {x: [{devices: all, mig-enabled: true, "
        "mig-devices: {1g.5gb: *h}}]}\n")
    (refused,) = from_mig_parted(laughs)
    assert refused.reason == "mig-devices '1g.5gb': the count must be a whole number from 0 to 7, got a list"


@pytest.mark.parametrize("gpu, reason", [
    ((), "the label value would be 5005 characters; Kubernetes allows 63 (give --gpu to write ids)"),
    (("--gpu", "A100-SXM4-40GB"), "on A100-SXM4-40GB: unknown profile '99999"),
], ids=["no-gpu", "gpu"])
def test_a_profile_name_of_5000_digits_is_refused_as_its_config_only(tmp_path, gpu, reason):
    """Ordering the names by their slices read the digits before "g." with int(): 5,000 of them raised ValueError
    (Python's digit limit), an internal error (exit 70) for the whole file. YAML takes such a key only written
    explicitly (``? key``)."""
    from tests.function.test_bad_files import cli

    (tmp_path / "c.yaml").write_text("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
                                     "      mig-devices:\n        ? \"%sg.5gb\"\n        : 1\n  all-1g.5gb:\n"
                                     "    - {devices: all, mig-enabled: true, mig-devices: {1g.5gb: 7}}\n" % ("9" * 5000))
    done = cli("convert", "--from-mig-parted", str(tmp_path / "c.yaml"), *gpu)
    assert done.returncode == 1 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("x: refused: " + reason) and len(lines[-1]) < 400, lines
    assert any(line.startswith("all-1g.5gb") and "refused" not in line for line in lines), lines


def test_a_yaml_error_names_its_line_and_column_first(tmp_path):
    """PyYAML writes where the problem is at the end of its message, after a copy of the lines around it: cut at
    160 characters, the error said "while parsing a flow sequence ... version: [v1, ..." and never which line
    held the problem (here line 3, column 6)."""
    from tests.function.test_bad_files import cli

    (tmp_path / "c.yaml").write_text("version: [v1, %s\n\nmig: x: y\n" % ", ".join(["item"] * 40))
    done = cli("convert", "--from-mig-parted", str(tmp_path / "c.yaml"))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    text = error_text(done.stderr)
    assert text.startswith("ack-mig-hook: error: %s is not YAML: line 3, column 4: " % (tmp_path / "c.yaml")), text
    assert "expected ',' or ']', but got ':'" in text, text
    assert text.count("(") == text.count(")") and "^" not in text, text


@pytest.mark.parametrize("value, shown", [("0x20B010DE", "a number"), ("[0x20B010DE]", "a list holding a number"),
                                          ("{a: b}", "an object")])
def test_a_device_filter_yaml_reads_as_no_text_refuses_its_config_alone(tmp_path, value, shown):
    """The reader rule on a file a person wrote: YAML reads an unquoted PCI id (0x20B010DE) as a number. It was
    shown as its decimal (548409566), matched no GPU, and the layout converted without the GPU's check, a 7g.40gb
    plus a 1g.5gb that no A100 40GB holds included; mig-parted itself refuses a device-filter that is not text
    or a list of text (api/spec/v1/spec.go, MigConfigSpec.UnmarshalJSON). That config is refused naming the form;
    the others convert."""
    from tests.function.test_bad_files import cli

    (tmp_path / "c.yaml").write_text(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      device-filter: %s\n      mig-enabled: true\n"
        "      mig-devices: {7g.40gb: 1, 1g.5gb: 1}\n  all-1g.5gb:\n"
        "    - {devices: all, mig-enabled: true, mig-devices: {1g.5gb: 7}}\n" % value)
    done = cli("convert", "--from-mig-parted", str(tmp_path / "c.yaml"))
    assert done.returncode == 1 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == ("x: refused: device-filter is %s; write a PCI device id as text in quotes "
                         "(device-filter: \"0x20B010DE\") or a list of them" % shown), lines
    assert any(line.startswith("all-1g.5gb") and "refused" not in line for line in lines), lines
