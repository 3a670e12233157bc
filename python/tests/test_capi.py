"""Torch-free tests of the ctypes binding: structure layouts against the C compiler, loading the
library without a GPU, problem building and the library's own argument checks."""

import ctypes
import os

import pytest

from conftest import CC, ROOT, library_or_skip

from xent import _capi


def test_layout_table_matches_ctypes():
    _capi.check_layout()
    assert ctypes.sizeof(_capi.Problem) == 96
    assert ctypes.sizeof(_capi.Args) == 72


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_layout_matches_gcc():
    got = _capi.compare_layout(os.path.join(ROOT, "include"), CC)
    assert set(got) == {_capi.Problem, _capi.Args, _capi.DeviceInfo}
    assert [f for f, _ in _capi.Problem._fields_][-6:] == ["op", "z_loss", "softcap", "vocab", "class_offset",
                                                           "shards"]
    assert [f for f, _ in _capi.Args._fields_][-3:] == ["grad", "dloss", "stats"]


def test_enums_match_header():
    text = open(os.path.join(ROOT, "include", "xent.h")).read()
    for name in ("XENT_OK", "XENT_EINVAL", "XENT_EBADTARGET", "XENT_ENOTFOUND", "XENT_OP_FORWARD",
                 "XENT_OP_FUSED", "XENT_OP_BACKWARD", "XENT_OP_COMBINE", "XENT_OP_RESCALE"):
        assert "%s = %d" % (name, getattr(_capi, name)) in text, name
    assert "#define XENT_DESCRIBE_LEN %d\n" % _capi.XENT_DESCRIBE_LEN in text


def test_library_loads_without_gpu():
    lib = library_or_skip()
    for fn in ("xent_plan_lookup", "xent_plan_get", "xent_plan_launch", "xent_check_targets"):
        assert getattr(lib, fn).argtypes is not None
    assert _capi.errstr(_capi.XENT_ENOTFOUND, lib)


def test_library_version_is_the_headers_and_the_packages():
    import re
    import xent
    lib = library_or_skip()
    text = open(os.path.join(ROOT, "include", "xent.h")).read()
    v = int(re.search(r"#define XENT_VERSION (\d+)", text).group(1))
    assert lib.xent_version() == v
    assert _capi.library_version(lib) == xent.__version__


def test_library_candidates_env(monkeypatch, tmp_path):
    monkeypatch.setenv("XENT_LIB", str(tmp_path / "nope.so"))
    assert _capi.default_library_path() == str(tmp_path / "nope.so")
    with pytest.raises(OSError, match="XENT_LIB"):
        _capi.load_library()


def test_datadir_default():
    import xent  # noqa: F401 - sets XENT_DATADIR when unset
    d = _capi.default_datadir()
    assert d is not None and any(f.endswith(".sql") for f in os.listdir(d))
    assert os.environ.get("XENT_DATADIR")


class _Ptr:
    """Stands in for a tensor: make_args reads only data_ptr()."""

    def __init__(self, p):
        self.p = p

    def data_ptr(self):
        return self.p


def test_make_args_fields():
    given = {name: _Ptr(0x1000 * (i + 1)) for i, (name, _) in enumerate(_capi.Args._fields_) if i % 2 == 0}
    a = _capi.make_args(**given)
    for name, _ in _capi.Args._fields_:
        want = given[name].p if name in given else None
        assert getattr(a, name) == want, name
    assert all(getattr(_capi.make_args(), name) is None for name, _ in _capi.Args._fields_)


def test_make_problem_fields():
    lib = library_or_skip()
    p = _capi.make_problem(lib, 8, 100, "torch.bfloat16", "torch.int32", "sum", ignore_index=3,
                           label_smoothing=0.1, lse=True, row_stride=128, op="fused", z_loss=1e-4, softcap=30.0)
    assert (p.n, p.c, p.row_stride, p.logits, p.targets, p.reduction) == (8, 100, 128, _capi.XENT_BF16,
                                                                         _capi.XENT_I32, _capi.XENT_REDUCE_SUM)
    assert (p.ignore_index, p.write_lse, p.op, p.vocab, p.shards) == (3, 1, _capi.XENT_OP_FUSED, 0, 0)
    assert p.z_loss == pytest.approx(1e-4) and p.softcap == pytest.approx(30.0)
    s = _capi.make_problem(lib, 8, 100, vocab=400, class_offset=300)
    assert (s.vocab, s.class_offset) == (400, 300)
    c = _capi.make_problem(lib, 8, 400, op="combine", shards=4, lse=True)
    assert c.shards == 4


@pytest.mark.parametrize("kw, why", [
    (dict(z_loss=1e-4, has_weights=True), "z_loss"),
    (dict(vocab=50), "vocab"),
    (dict(vocab=400, class_offset=350), "class_offset"),
    (dict(vocab=400, class_offset=0, op="fused"), "shard"),
    (dict(op="combine"), "shards"),
    (dict(shards=2), "shards"),
    (dict(softcap=-1.0), "softcap"),
    (dict(label_smoothing=1.5), "label_smoothing"),
    (dict(row_stride=50), "row_stride"),
])
def test_problem_check_rejects(kw, why):
    lib = library_or_skip()
    with pytest.raises(_capi.XentError, match=why) as e:
        _capi.make_problem(lib, 8, 100, **kw)
    assert e.value.rc == _capi.XENT_EINVAL


def test_bad_names_are_value_errors():
    lib = library_or_skip()
    with pytest.raises(ValueError):
        _capi.make_problem(lib, 8, 100, reduction="avg")
    with pytest.raises(ValueError):
        _capi.make_problem(lib, 8, 100, "torch.float64")


def test_context_without_driver_is_an_error_not_a_crash():
    lib = library_or_skip()
    ctx = ctypes.c_void_p(None)
    rc = lib.xent_context_create(ctypes.byref(ctx), 0)
    try:
        if rc == _capi.XENT_OK:
            pytest.skip("a CUDA device is present")
        assert rc in (_capi.XENT_ENODRIVER, _capi.XENT_ENODEVICE, _capi.XENT_ECUDA)
        assert _capi.errstr(rc, lib)
    finally:
        if ctx:
            lib.xent_context_destroy(ctx)
