"""yasgd.wheelarch: cuobjdump's listings, NVIDIA's compatibility rule, the shipped table."""
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
