"""yasgd.wheelarch: cuobjdump's listings, NVIDIA's compatibility rule, the shipped table."""
import zipfile

import pytest

from yasgd import wheelarch

#: real lines of cuobjdump 13.5.37 --list-elf on mxnet-cu112==1.9.1's libmxnet.so
ELF_CU112 = """\
ELF file    1: libmxnet.1.sm_50.cubin
ELF file    2: libmxnet.2.sm_60.cubin
ELF file    3: libmxnet.3.sm_70.cubin
ELF file    4: libmxnet.4.sm_80.cubin
ELF file    5: libmxnet.5.sm_86.cubin
ELF file    6: libmxnet.6.sm_50.cubin
ELF file  990: libmxnet.990.sm_86.cubin
"""
#: real lines of cuobjdump 13.5.37 on an object built with nvcc -gencode
#: arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90 (--list-ptx, then
#: --list-elf); the MXNet wheels embed no PTX at all
PTX_PROBE = "PTX file    1: k.1.sm_90.ptx\n"
ELF_PROBE = "ELF file    1: k.1.sm_80.cubin\n"
#: what --list-ptx prints (on stderr) for a wheel without PTX
NO_PTX = ("cuobjdump info    : No PTX file found to extract from '/tmp/wheels/so/cu112/mxnet/"
          "libmxnet.so'. You may try with -all option.\n")


def test_parse_real_listings():
    assert wheelarch.parse_listing(ELF_CU112) == (
        ["sm_50", "sm_60", "sm_70", "sm_80", "sm_86"], [])
    assert wheelarch.parse_listing(PTX_PROBE) == ([], ["compute_90"])
    assert wheelarch.parse_listing(ELF_PROBE + PTX_PROBE) == (["sm_80"], ["compute_90"])
    assert wheelarch.parse_listing(NO_PTX) == ([], [])
    assert wheelarch.parse_listing("") == ([], [])


def test_parse_sorts_numerically_and_keeps_suffixes():
    text = ("ELF file    1: a.1.sm_100.cubin\nELF file    2: a.2.sm_90a.cubin\n"
            "ELF file    3: a.3.sm_90.cubin\nELF file    4: a.4.sm_75.cubin\n")
    assert wheelarch.parse_listing(text)[0] == ["sm_75", "sm_90", "sm_90a", "sm_100"]


def _wheel(sass=(), ptx=()):
    return {"name": "w", "sass": list(sass), "ptx": list(ptx)}


def test_sass_runs_same_major_lower_or_equal_minor():
    w = _wheel(sass=["sm_70"])
    assert wheelarch.runs(w, "7.0") and wheelarch.runs(w, "7.2") and wheelarch.runs(w, "7.5")
    assert not wheelarch.runs(w, "8.0")
    assert not wheelarch.runs(w, "6.1")
    assert not wheelarch.runs(_wheel(sass=["sm_86"]), "8.0")
    assert wheelarch.match(_wheel(sass=["sm_80", "sm_86"]), "8.9") == "SASS sm_86"


def test_ptx_is_compiled_forward():
    w = _wheel(ptx=["compute_80"])
    assert wheelarch.runs(w, "9.0") and wheelarch.runs(w, "8.0") and wheelarch.runs(w, "12.0")
    assert not wheelarch.runs(w, "7.5")
    assert wheelarch.match(_wheel(sass=["sm_80"], ptx=["compute_80"]), "9.0") == \
        "PTX compute_80 (JIT)"
    assert wheelarch.match(_wheel(sass=["sm_80"], ptx=["compute_80"]), "8.0") == "SASS sm_80"


def test_nothing_runs_9_0_without_sm_9x_or_ptx_up_to_90():
    assert not wheelarch.runs(_wheel(sass=["sm_50", "sm_60", "sm_70", "sm_80", "sm_86"]), "9.0")
    assert not wheelarch.runs(_wheel(sass=["sm_86"], ptx=["compute_100"]), "9.0")
    assert wheelarch.runs(_wheel(sass=["sm_90"]), "9.0")
    assert wheelarch.runs(_wheel(ptx=["compute_90"]), "9.0")


def test_arch_specific_code_runs_only_its_own_capability():
    assert wheelarch.runs(_wheel(sass=["sm_90a"]), "9.0")
    assert not wheelarch.runs(_wheel(sass=["sm_80a"]), "8.6")
    assert not wheelarch.runs(_wheel(ptx=["compute_90a"]), "10.0")


def test_capability_is_checked():
    for bad in ("9", "sm_90", "9.x", ""):
        with pytest.raises(ValueError):
            wheelarch.runs(_wheel(sass=["sm_90"]), bad)


def test_shipped_table():
    table = wheelarch.load_table()
    names = [w["name"] for w in table["wheels"]]
    assert names == ["mxnet-cu110==1.9.1", "mxnet-cu112==1.9.1", "mxnet-cu117==1.9.1"]
    for w in table["wheels"]:
        assert w["sass"], w["name"]
        assert w["sass"] == sorted(w["sass"], key=wheelarch.arch_key)
        assert len(w["sha256"]) == 64 and w["size_bytes"] > 0
        assert w["file"].startswith(w["name"].split("==")[0].replace("-", "_") + "-1.9.1-")
    assert table["cuobjdump"]["version"]


def test_verdicts_from_the_shipped_table():
    every = ["mxnet-cu110==1.9.1", "mxnet-cu112==1.9.1", "mxnet-cu117==1.9.1"]
    assert wheelarch.wheels_for("7.0") == every
    assert wheelarch.wheels_for("8.0") == every
    assert wheelarch.wheels_for("9.0") == []
    line = wheelarch.describe("9.0")
    assert line.startswith("compute capability 9.0: no kernels in mxnet-cu110==1.9.1 (sm_50..")
    assert line.endswith("wheels that run it: none")
    assert "no kernels" not in wheelarch.describe("8.0")
    assert "mxnet-cu112==1.9.1 (SASS sm_80)" in wheelarch.describe("8.0")


def test_describe_names_both_sides():
    table = {"wheels": [_wheel(sass=["sm_70"]) | {"name": "a==1"},
                        _wheel(sass=["sm_80"], ptx=["compute_80"]) | {"name": "b==1"}]}
    assert wheelarch.wheels_for("8.6", table) == ["b==1"]
    assert wheelarch.describe("8.6", table) == (
        "compute capability 8.6: no kernels in a==1 (sm_70, no PTX); "
        "wheels that run it: b==1 (SASS sm_80)")


def test_block_lists_every_wheel_and_gpu():
    block = wheelarch.render_block()
    for name in ("mxnet-cu110==1.9.1", "mxnet-cu112==1.9.1", "mxnet-cu117==1.9.1",
                 "V100 (7.0)", "A100 (8.0)", "H100 (9.0)", "H200 (9.0)"):
        assert name in block


# -- inspect's bad input: one line naming what is wrong, exit 2, before any tool runs ------
def _inspect_setup(tmp_path):
    """(a wheel holding a libmxnet.so, a stand-in cuobjdump that notes each run in ran.txt)."""
    wheel = tmp_path / "mxnet_cu112-1.9.1-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(wheelarch.LIBRARY, b"\x7fELF not really")
    tool = tmp_path / "cuobjdump"
    tool.write_text(f'#!/bin/sh\necho "$1" >> {tmp_path / "ran.txt"}\n'
                    'case "$1" in\n'
                    '  --version) echo "Cuda compilation tools, release 13.5, V13.5.37";;\n'
                    f'  --list-elf) echo "{ELF_PROBE.strip()}";;\n'
                    'esac\n')
    tool.chmod(0o755)
    return str(wheel), str(tool)


def _one_error_line(capsys):
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1, (out, err)
    assert lines[0].startswith("yasgd: error: wheelarch inspect: "), err
    assert "Traceback" not in err
    return lines[0]


def test_inspect_out_replaces_no_file_it_did_not_write(tmp_path, capsys):
    wheel, tool = _inspect_setup(tmp_path)
    notes = tmp_path / "notes.json"
    notes.write_bytes(b'{"mine": "not a wheel table"}\n')
    rc = wheelarch.main(["inspect", wheel, "--cuobjdump", tool, "--out", str(notes)])
    line = _one_error_line(capsys)
    assert rc == 2 and f"--out {notes}: {notes} exists and is not a table written by" in line
    assert notes.read_bytes() == b'{"mine": "not a wheel table"}\n'
    assert not (tmp_path / "ran.txt").exists()      # refused before cuobjdump ran


def test_inspect_out_replaces_an_empty_file_or_its_own_table(tmp_path, capsys):
    wheel, tool = _inspect_setup(tmp_path)
    out = tmp_path / "table.json"
    out.write_bytes(b"")
    for _ in range(2):              # an empty file, then the table written the first time
        assert wheelarch.main(["inspect", wheel, "--cuobjdump", tool, "--out", str(out)]) == 0
        table = wheelarch.load_table(str(out))
        assert [(w["name"], w["sass"], w["ptx"]) for w in table["wheels"]] == \
            [("mxnet-cu112==1.9.1", ["sm_80"], [])]
        assert table["cuobjdump"]["version"] == "13.5.37"
    assert capsys.readouterr().err == ""
    # the shipped table is such an output: inspect may write it again
    assert wheelarch.OURS[0](open(wheelarch.TABLE, "rb").read(1 << 16))


def test_inspect_names_a_bad_wheel_before_looking_for_cuobjdump(tmp_path, capsys):
    wheel, tool = _inspect_setup(tmp_path)
    (tmp_path / "text-1.0.whl").write_text("not a zip\n")
    empty = tmp_path / "empty-1.0.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("mxnet/other.py", "")
    no_tool = str(tmp_path / "no-such-cuobjdump")
    for bad, what in [(tmp_path / "nope-1.0.whl", "no such file"),
                      (tmp_path / "text-1.0.whl", "not a zip file"),
                      (empty, f"holds no {wheelarch.LIBRARY}")]:
        rc = wheelarch.main(["inspect", wheel, str(bad), "--cuobjdump", no_tool])
        line = _one_error_line(capsys)
        assert rc == 2 and f"wheel {bad}" in line and what in line, line
        assert "no-such-cuobjdump" not in line
    # with good wheels, a missing cuobjdump is named as the option that gave it
    rc = wheelarch.main(["inspect", wheel, "--cuobjdump", no_tool])
    assert rc == 2 and f"--cuobjdump {no_tool}: " in _one_error_line(capsys)


def test_describe_checks_every_capability_before_it_prints(capsys):
    assert wheelarch.main(["describe", "7.0", "abc"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("yasgd: error: wheelarch describe: ") \
        and err.count("\n") == 1, (out, err)
    assert wheelarch.main(["describe", "7.0", "9.0"]) == 0
    assert capsys.readouterr().out.splitlines() == [wheelarch.describe("7.0"),
                                                    wheelarch.describe("9.0")]
