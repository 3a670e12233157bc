"""xent._capi — the ctypes binding to libxent.so (include/xent.h), torch-optional.

The one binding of the project: the torch layer (xent._ops), bench/bench.py and
tests/gpu/torch_crosscheck.py use it. It needs no torch for the structures, the
enums, loading the library and building problems; Xent.forward and the Plan
launchers take torch tensors (or anything with data_ptr/shape/stride/dtype/device).

The library is $XENT_LIB if set, else the libxent.so bundled in the installed
package (xent/lib/libxent.so), else the checkout's build/libxent.so. Loading it
does not load the CUDA driver (libxent dlopens libcuda.so.1 at first use), so
this imports on machines without a GPU.

Every structure mirrors include/xent.h field by field; the layout is checked at
import against the sizes and offsets gcc gives on x86-64 Linux (gcc 12,
-Iinclude, printing sizeof/offsetof of every field; `python3 -m xent._capi`
and python/tests/test_capi.py redo that comparison with the C compiler):

    xent_problem      96 bytes: n@0 c@8 row_stride@16 logits@24 targets@28
                      reduction@32 ignore_index@40 label_smoothing@48
                      has_weights@52 write_lse@56 op@60 z_loss@64 softcap@68
                      vocab@72 class_offset@80 shards@88
    xent_args         72 bytes: logits@0 targets@8 weights@16 loss@24 lse@32
                      workspace@40 grad@48 dloss@56 stats@64
    xent_device_info 320 bytes: name@0[256] key@256[32] cc_major@288
                      cc_minor@292 sm_count@296 l2_bytes@304
                      global_mem_bytes@312

Usage:

    import torch
    from xent._capi import Xent
    xe = Xent()                                    # context on torch's current device
    loss = xe.forward(logits, targets)             # like F.cross_entropy(logits, targets)
    plan = xe.plan(logits, targets)                # a compiled plan for this problem
    print(plan.source_name, plan.describe())
    out = torch.empty((), device='cuda')
    go = plan.launcher(logits, targets, out)       # arguments bound once
    go()                                           # one ctypes call per launch
    rc = xe.check_targets()                        # XENT_OK or XENT_EBADTARGET

All launches go to torch.cuda.current_stream() unless a stream is given.
"""

import ctypes
import os

try:  # torch is needed for forward() and for allocating outputs only
    import torch
except ImportError:  # pragma: no cover - lets the layout checks run without torch
    torch = None

__all__ = [
    "Xent", "Plan", "XentError", "Problem", "Args", "DeviceInfo", "load_library",
    "default_library_path", "library_candidates", "default_datadir", "library_version", "plan_source",
    "plan_describe",
    "check_layout", "XENT_OK", "XENT_EINVAL", "XENT_EBADTARGET", "XENT_ENOTFOUND", "SOURCE_NAMES",
    "XENT_OP_FORWARD", "XENT_OP_FUSED", "XENT_OP_BACKWARD", "XENT_OP_COMBINE", "XENT_OP_RESCALE",
]

# --- status codes, enums (include/xent.h) ----------------------------------

XENT_OK = 0
XENT_EINVAL = 1
XENT_ENODRIVER = 2
XENT_ENODEVICE = 3
XENT_ECUDA = 4
XENT_ECOMPILE = 5
XENT_ENOMEM = 6
XENT_ECACHE = 7
XENT_EBADTARGET = 8
XENT_ENOTFOUND = 10
# bytes that always hold xent_plan_describe's text
XENT_DESCRIBE_LEN = 1400

STATUS_NAMES = {
    0: "XENT_OK", 1: "XENT_EINVAL", 2: "XENT_ENODRIVER", 3: "XENT_ENODEVICE",
    4: "XENT_ECUDA", 5: "XENT_ECOMPILE", 6: "XENT_ENOMEM", 7: "XENT_ECACHE",
    8: "XENT_EBADTARGET", 10: "XENT_ENOTFOUND",
}

XENT_F32, XENT_F16, XENT_BF16 = 0, 1, 2
XENT_I32, XENT_I64 = 0, 1
XENT_REDUCE_NONE, XENT_REDUCE_SUM, XENT_REDUCE_MEAN = 0, 1, 2

XENT_OP_FORWARD, XENT_OP_FUSED, XENT_OP_BACKWARD, XENT_OP_COMBINE, XENT_OP_RESCALE = 0, 1, 2, 3, 4
OPS = {"forward": XENT_OP_FORWARD, "fused": XENT_OP_FUSED, "backward": XENT_OP_BACKWARD,
       "combine": XENT_OP_COMBINE, "rescale": XENT_OP_RESCALE}

REDUCTIONS = {"none": XENT_REDUCE_NONE, "sum": XENT_REDUCE_SUM, "mean": XENT_REDUCE_MEAN}
SOURCE_NAMES = {0: "user_db", 1: "shipped", 2: "nearest", 3: "heuristic", 4: "explicit", 5: "arch"}

# keyed by str(tensor.dtype), so that no torch import is needed to build them
_LOGIT_DTYPES = {"torch.float32": XENT_F32, "torch.float16": XENT_F16, "torch.bfloat16": XENT_BF16}
_INDEX_DTYPES = {"torch.int32": XENT_I32, "torch.int64": XENT_I64}


# --- structures -------------------------------------------------------------

class Problem(ctypes.Structure):
    """struct xent_problem"""
    _fields_ = [
        ("n", ctypes.c_int64),
        ("c", ctypes.c_int64),
        ("row_stride", ctypes.c_int64),
        ("logits", ctypes.c_int),        # enum xent_dtype
        ("targets", ctypes.c_int),       # enum xent_index
        ("reduction", ctypes.c_int),     # enum xent_reduction
        ("ignore_index", ctypes.c_int64),
        ("label_smoothing", ctypes.c_float),
        ("has_weights", ctypes.c_int),
        ("write_lse", ctypes.c_int),
        ("op", ctypes.c_int),            # enum xent_op
        ("z_loss", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("vocab", ctypes.c_int64),
        ("class_offset", ctypes.c_int64),
        ("shards", ctypes.c_int),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class Args(ctypes.Structure):
    """struct xent_args (device pointers)"""
    _fields_ = [
        ("logits", ctypes.c_void_p),
        ("targets", ctypes.c_void_p),
        ("weights", ctypes.c_void_p),
        ("loss", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("grad", ctypes.c_void_p),
        ("dloss", ctypes.c_void_p),
        ("stats", ctypes.c_void_p),
    ]


def make_args(logits=None, targets=None, weights=None, loss=None, lse=None, workspace=None, grad=None,
              dloss=None, stats=None):
    """An Args holding the device pointers of the tensors given by field name (None: NULL)."""
    # one positional constructor call: keywords, and a setattr a field, cost more on the launch path
    return Args(logits.data_ptr() if logits is not None else None,
                targets.data_ptr() if targets is not None else None,
                weights.data_ptr() if weights is not None else None,
                loss.data_ptr() if loss is not None else None,
                lse.data_ptr() if lse is not None else None,
                workspace.data_ptr() if workspace is not None else None,
                grad.data_ptr() if grad is not None else None,
                dloss.data_ptr() if dloss is not None else None,
                stats.data_ptr() if stats is not None else None)


class DeviceInfo(ctypes.Structure):
    """struct xent_device_info"""
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("key", ctypes.c_char * 32),
        ("cc_major", ctypes.c_int),
        ("cc_minor", ctypes.c_int),
        ("sm_count", ctypes.c_int),
        ("l2_bytes", ctypes.c_size_t),
        ("global_mem_bytes", ctypes.c_size_t),
    ]


# sizeof and (offset, size) of every field as gcc reports them for include/xent.h
_C_LAYOUT = {
    Problem: (96, {"n": (0, 8), "c": (8, 8), "row_stride": (16, 8), "logits": (24, 4),
                   "targets": (28, 4), "reduction": (32, 4), "ignore_index": (40, 8),
                   "label_smoothing": (48, 4), "has_weights": (52, 4), "write_lse": (56, 4),
                   "op": (60, 4), "z_loss": (64, 4), "softcap": (68, 4), "vocab": (72, 8),
                   "class_offset": (80, 8), "shards": (88, 4)}),
    Args: (72, {"logits": (0, 8), "targets": (8, 8), "weights": (16, 8), "loss": (24, 8),
                "lse": (32, 8), "workspace": (40, 8), "grad": (48, 8), "dloss": (56, 8),
                "stats": (64, 8)}),
    DeviceInfo: (320, {"name": (0, 256), "key": (256, 32), "cc_major": (288, 4),
                       "cc_minor": (292, 4), "sm_count": (296, 4), "l2_bytes": (304, 8),
                       "global_mem_bytes": (312, 8)}),
}


def check_layout():
    """Assert that the ctypes structures match the C layout (x86-64 / LP64)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return  # the table above is for 64-bit targets only
    for struct, (size, fields) in _C_LAYOUT.items():
        assert ctypes.sizeof(struct) == size, (struct.__name__, ctypes.sizeof(struct), size)
        assert [f for f, _ in struct._fields_] == list(fields), struct.__name__
        for name, (off, fsize) in fields.items():
            d = getattr(struct, name)
            assert (d.offset, d.size) == (off, fsize), (struct.__name__, name, d.offset, d.size)


check_layout()


# --- library ----------------------------------------------------------------

_libs = {}


_HERE = os.path.dirname(os.path.abspath(__file__))


def library_candidates():
    """Where libxent.so is looked for, in order: $XENT_LIB, the package's bundled copy, the checkout's build/."""
    out = []
    env = os.environ.get("XENT_LIB")
    if env:
        out.append(env)
    out.append(os.path.join(_HERE, "lib", "libxent.so"))
    out.append(os.path.normpath(os.path.join(_HERE, "..", "..", "build", "libxent.so")))
    return out


def default_library_path():
    """$XENT_LIB if set (even if missing: the error names it), else the first existing candidate."""
    cands = library_candidates()
    if os.environ.get("XENT_LIB"):
        return cands[0]
    for p in cands:
        if os.path.exists(p):
            return p
    return cands[0]


def default_datadir():
    """The folder of the shipped tune caches (<gpu>.sql): bundled in the package, else the checkout's tunecache/."""
    for d in (os.path.join(_HERE, "data"), os.path.normpath(os.path.join(_HERE, "..", "..", "tunecache"))):
        if os.path.isdir(d) and any(f.endswith(".sql") for f in os.listdir(d)):
            return d
    return None


def _preload_nvrtc():
    """Load the toolkit's libnvrtc.so globally; True if one was loaded."""
    import glob
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        for lib in sorted(glob.glob(os.path.join(root or "", "lib64", "libnvrtc.so*")), key=len) if root else ():
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                continue
    return False


def load_library(path=None):
    """Load libxent.so (once per path) and declare every function's C signature."""
    path = os.path.abspath(path or default_library_path())
    if path in _libs:
        return _libs[path]
    if not os.path.exists(path):
        raise OSError("libxent.so not found at %s (looked at: %s); build it with make, install the "
                      "package with pip, or set XENT_LIB" % (path, ", ".join(library_candidates())))
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        # libxent.so records no RUNPATH: where the loader's search does not know CUDA's folder, NVRTC
        # is loaded first from the toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda) and the load retried
        if "nvrtc" not in str(e) or not _preload_nvrtc():
            raise
        lib = ctypes.CDLL(path)
    P, I, S, V = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    sigs = {
        "xent_version": (I, []),
        "xent_errstr": (V, [I]),
        "xent_problem_init": (None, [ctypes.POINTER(Problem), ctypes.c_int64, ctypes.c_int64]),
        "xent_problem_check": (I, [ctypes.POINTER(Problem), ctypes.c_char_p, S]),
        "xent_context_create": (I, [ctypes.POINTER(P), I]),
        "xent_context_destroy": (None, [P]),
        "xent_errmsg": (V, [P]),
        "xent_device_get_info": (I, [P, ctypes.POINTER(DeviceInfo)]),
        "xent_plan_get": (I, [P, ctypes.POINTER(Problem), ctypes.POINTER(P)]),
        "xent_plan_lookup": (I, [P, ctypes.POINTER(Problem), ctypes.POINTER(P)]),
        "xent_plan_source": (I, [P]),
        "xent_plan_describe": (I, [P, ctypes.c_char_p, S]),
        "xent_workspace_size": (S, [P]),
        "xent_plan_launch": (I, [P, P, ctypes.POINTER(Args)]),
        "xent_forward": (I, [P, ctypes.POINTER(Problem), ctypes.POINTER(Args), P]),
        "xent_check_targets": (I, [P, P]),
    }
    for name, (res, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = argtypes
    _libs[path] = lib
    return lib


def library_version(lib=None):
    """The loaded library's version as "major.minor.patch" (xent_version())."""
    v = (lib or load_library()).xent_version()
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)


def errstr(rc, lib=None):
    lib = lib or load_library()
    s = lib.xent_errstr(int(rc))
    return s.decode(errors="replace") if s else ""


class XentError(RuntimeError):
    """A non-zero xent status: .rc, .name, .errstr and .errmsg."""

    def __init__(self, rc, what, errstr_text, errmsg_text):
        self.rc = rc
        self.name = STATUS_NAMES.get(rc, "status %d" % rc)
        self.errstr = errstr_text
        self.errmsg = errmsg_text
        msg = "%s failed: %s (%s)" % (what, errstr_text, self.name)
        if errmsg_text:
            msg += ": " + errmsg_text
        super().__init__(msg)


# --- helpers on tensors (duck-typed: torch.Tensor or anything alike) --------

def _dtype_key(t):
    return str(t.dtype)


def _check_device(t, what, ordinal):
    dev = t.device
    if getattr(dev, "type", None) != "cuda":
        raise ValueError("%s must be a CUDA tensor (got %s)" % (what, dev))
    idx = dev.index if dev.index is not None else ordinal
    if idx != ordinal:
        raise ValueError("%s is on cuda:%s but the xent context is on cuda:%d" % (what, idx, ordinal))


def _row_stride(logits):
    n, c = logits.shape
    rs = logits.stride(0)
    if n == 1 and rs < c:  # a single row: torch may report any stride for dim 0
        rs = c
    return rs


def _current_stream(stream, ordinal):
    """A stream handle as an int: the given one (int or torch.cuda.Stream), else torch's current."""
    if stream is not None:
        if isinstance(stream, int):
            return stream
        return int(getattr(stream, "cuda_stream", stream))
    if torch is None:
        return 0  # the legacy default stream
    return int(torch.cuda.current_stream(ordinal).cuda_stream)


class Plan:
    """A compiled, loaded kernel for one problem; owned by its context."""

    def __init__(self, xent, handle, problem):
        self._xent = xent
        self._handle = handle          # ctypes.c_void_p
        self.problem = problem         # Problem (a copy)

    @property
    def source(self):
        """The xent_source code of the plan's configuration."""
        return int(self._xent._lib.xent_plan_source(self._handle))

    @property
    def source_name(self):
        return SOURCE_NAMES.get(self.source, "source %d" % self.source)

    def describe(self):
        """The plan's configuration as text ("VEC=4 TPR=32 ...")."""
        buf = ctypes.create_string_buffer(XENT_DESCRIBE_LEN)
        rc = self._xent._lib.xent_plan_describe(self._handle, buf, ctypes.sizeof(buf))
        self._xent._check(rc, "xent_plan_describe")
        return buf.value.decode(errors="replace")

    @property
    def workspace_size(self):
        return int(self._xent._lib.xent_workspace_size(self._handle))

    def _bind(self, logits, targets, out, weights, lse_out, workspace):
        p = self.problem
        xe = self._xent
        if tuple(logits.shape) != (p.n, p.c) or _LOGIT_DTYPES.get(_dtype_key(logits)) != p.logits:
            raise ValueError("logits %s %s do not match the plan's problem %s"
                             % (tuple(logits.shape), logits.dtype, p.as_dict()))
        if p.c > 1 and logits.stride(1) != 1:
            raise ValueError("logits must have stride(1) == 1")
        if _row_stride(logits) != p.row_stride:
            raise ValueError("logits row stride %d != plan's %d" % (_row_stride(logits), p.row_stride))
        if tuple(targets.shape) != (p.n,) or _INDEX_DTYPES.get(_dtype_key(targets)) != p.targets:
            raise ValueError("targets do not match the plan's problem")
        if p.n > 1 and targets.stride(0) != 1:
            raise ValueError("targets must be contiguous")
        want = p.n if p.reduction == XENT_REDUCE_NONE else 1
        if out.numel() != want or _dtype_key(out) != "torch.float32" or (want > 1 and out.stride(0) != 1):
            raise ValueError("out must be a contiguous float32 tensor of %d element(s)" % want)
        if bool(p.has_weights) != (weights is not None):
            raise ValueError("weights given/missing against the plan's has_weights")
        if weights is not None and (tuple(weights.shape) != (p.c,) or _dtype_key(weights) != "torch.float32"
                                    or (p.c > 1 and weights.stride(0) != 1)):
            raise ValueError("weights must be a contiguous float32 tensor of c elements")
        if bool(p.write_lse) != (lse_out is not None):
            raise ValueError("lse_out given/missing against the plan's write_lse")
        if lse_out is not None and (lse_out.numel() != p.n or _dtype_key(lse_out) != "torch.float32"):
            raise ValueError("lse_out must be a contiguous float32 tensor of n elements")
        for t, what in ((logits, "logits"), (targets, "targets"), (out, "out"),
                        (weights, "weights"), (lse_out, "lse_out")):
            if t is not None:
                _check_device(t, what, xe.ordinal)
        return make_args(logits=logits, targets=targets, weights=weights, loss=out, lse=lse_out,
                         workspace=workspace)

    def launcher(self, logits, targets, out, weights=None, lse_out=None, stream=None, workspace=None):
        """Bind tensors once; return a no-argument function that launches the plan.

        The returned function makes one ctypes call (xent_plan_launch) and
        raises XentError on a non-zero status. It keeps the tensors alive.
        The stream is read now (torch's current stream unless given).
        """
        args = self._bind(logits, targets, out, weights, lse_out, workspace)
        fn = self._xent._lib.xent_plan_launch
        handle = self._handle
        s = ctypes.c_void_p(_current_stream(stream, self._xent.ordinal))
        aref = ctypes.byref(args)
        keep = (args, logits, targets, out, weights, lse_out, workspace, self)
        check = self._xent._check

        def launch():
            rc = fn(handle, s, aref)
            if rc:
                check(rc, "xent_plan_launch")

        launch.keep = keep
        return launch

    def launch(self, logits, targets, out, weights=None, lse_out=None, stream=None, workspace=None):
        """Bind and launch once (for repeated launches prefer launcher())."""
        self.launcher(logits, targets, out, weights, lse_out, stream, workspace)()
        return out


def plan_source(plan):
    """Name of where a plan's configuration came from ('shipped', 'heuristic', ...)."""
    return plan.source_name


def plan_describe(plan):
    """The plan's configuration text."""
    return plan.describe()


def make_problem(lib, n, c, dtype="torch.float32", targets_dtype="torch.int64", reduction="mean",
                 ignore_index=-100, label_smoothing=0.0, has_weights=False, lse=False, row_stride=None,
                 op="forward", z_loss=0.0, softcap=0.0, vocab=0, class_offset=0, shards=0):
    """An xent_problem from xent_problem_init's defaults and the given fields, checked by
    xent_problem_check (XentError with the library's reason when a field is out of range).
    dtype / targets_dtype: torch dtypes or their str(); reduction and op: names or codes."""
    p = Problem()
    lib.xent_problem_init(ctypes.byref(p), int(n), int(c))
    p.row_stride = int(row_stride) if row_stride is not None else int(c)
    try:
        p.logits = _LOGIT_DTYPES[str(dtype)] if not isinstance(dtype, int) else dtype
        p.targets = _INDEX_DTYPES[str(targets_dtype)] if not isinstance(targets_dtype, int) else targets_dtype
        p.reduction = REDUCTIONS[reduction] if not isinstance(reduction, int) else reduction
        p.op = OPS[op] if not isinstance(op, int) else op
    except KeyError as e:
        raise ValueError("unsupported dtype, reduction or op: %s" % e) from None
    p.ignore_index = int(ignore_index)
    p.label_smoothing = float(label_smoothing)
    p.has_weights = 1 if has_weights else 0
    p.write_lse = 1 if lse else 0
    p.z_loss = float(z_loss)
    p.softcap = float(softcap)
    p.vocab = int(vocab)
    p.class_offset = int(class_offset)
    p.shards = int(shards)
    why = ctypes.create_string_buffer(512)
    rc = lib.xent_problem_check(ctypes.byref(p), why, ctypes.sizeof(why))
    if rc:
        raise XentError(rc, "xent_problem_check", errstr(rc, lib), why.value.decode(errors="replace"))
    return p


class Xent:
    """A xent context on one CUDA device (torch's current device by default)."""

    def __init__(self, ordinal=None, lib_path=None):
        self._lib = load_library(lib_path)
        self._ctx = ctypes.c_void_p(None)
        if ordinal is None:
            if torch is None:
                raise RuntimeError("torch is not importable; pass the device ordinal")
            torch.cuda.init()
            ordinal = torch.cuda.current_device()
            torch.empty(1, device="cuda:%d" % ordinal)  # make torch's primary context live first
        self.ordinal = int(ordinal)
        rc = self._lib.xent_context_create(ctypes.byref(self._ctx), self.ordinal)
        if rc:
            msg = self.errmsg()
            if self._ctx:
                self._lib.xent_context_destroy(self._ctx)
                self._ctx = ctypes.c_void_p(None)
            raise XentError(rc, "xent_context_create(%d)" % self.ordinal, errstr(rc, self._lib), msg)

    # -- lifetime
    def close(self):
        if getattr(self, "_ctx", None):
            self._lib.xent_context_destroy(self._ctx)
            self._ctx = ctypes.c_void_p(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- errors
    def errmsg(self):
        s = self._lib.xent_errmsg(self._ctx)
        return s.decode(errors="replace") if s else ""

    def _check(self, rc, what):
        if rc:
            raise XentError(rc, what, errstr(rc, self._lib), self.errmsg())

    # -- device
    def device_info(self):
        info = DeviceInfo()
        self._check(self._lib.xent_device_get_info(self._ctx, ctypes.byref(info)), "xent_device_get_info")
        return {
            "name": info.name.decode(errors="replace"),
            "key": info.key.decode(errors="replace"),
            "cc": (info.cc_major, info.cc_minor),
            "sm_count": info.sm_count,
            "l2_bytes": int(info.l2_bytes),
            "global_mem_bytes": int(info.global_mem_bytes),
        }

    # -- problems
    def problem(self, n, c, dtype="torch.float32", targets_dtype="torch.int64", reduction="mean",
                ignore_index=-100, label_smoothing=0.0, has_weights=False, lse=False, row_stride=None,
                op="forward", z_loss=0.0, softcap=0.0, vocab=0, class_offset=0, shards=0):
        """Build and check an xent_problem (defaults from xent_problem_init); dtypes as torch dtypes or their str."""
        return make_problem(self._lib, n, c, dtype, targets_dtype, reduction, ignore_index, label_smoothing,
                            has_weights, lse, row_stride, op, z_loss, softcap, vocab, class_offset, shards)

    def _problem_for(self, logits, targets, weights, reduction, ignore_index, label_smoothing, lse):
        if logits.dim() != 2:
            raise ValueError("logits must be 2-D [n, c] (got %d-D)" % logits.dim())
        n, c = logits.shape
        if c > 1 and logits.stride(1) != 1:
            raise ValueError("logits must have stride(1) == 1 (got strides %s)" % (tuple(logits.stride()),))
        if _dtype_key(logits) not in _LOGIT_DTYPES:
            raise ValueError("logits dtype %s is not float32, float16 or bfloat16" % logits.dtype)
        if targets.dim() != 1 or targets.shape[0] != n:
            raise ValueError("targets must be 1-D with n = %d elements" % n)
        if _dtype_key(targets) not in _INDEX_DTYPES:
            raise ValueError("targets dtype %s is not int32 or int64" % targets.dtype)
        return self.problem(n, c, logits.dtype, targets.dtype, reduction, ignore_index, label_smoothing,
                            weights is not None, lse, _row_stride(logits))

    # -- plans
    def plan(self, logits, targets, weights=None, reduction="mean", ignore_index=-100,
             label_smoothing=0.0, lse=False):
        """The context's plan for the problem these (example) tensors describe."""
        p = self._problem_for(logits, targets, weights, reduction, ignore_index, label_smoothing, lse)
        return self.plan_for(p)

    def plan_for(self, problem):
        """The context's plan for an explicit Problem (see problem())."""
        h = ctypes.c_void_p(None)
        self._check(self._lib.xent_plan_get(self._ctx, ctypes.byref(problem), ctypes.byref(h)), "xent_plan_get")
        return Plan(self, h, Problem.from_buffer_copy(problem))  # a private copy

    plan_source = staticmethod(plan_source)
    plan_describe = staticmethod(plan_describe)

    # -- the one-call forward
    def forward(self, logits, targets, weights=None, reduction="mean", ignore_index=-100,
                label_smoothing=0.0, lse=False, out=None, stream=None):
        """F.cross_entropy(logits, targets, weight=weights, ...) computed by xent.

        Returns a float32 tensor: 0-d for 'sum'/'mean', [n] for 'none'; with
        lse=True returns (loss, lse[n]). `out` may be a preallocated float32
        tensor (1 element, or n for 'none'). Weights are converted to
        contiguous float32; targets are made contiguous.
        """
        if torch is None:
            raise RuntimeError("torch is required for Xent.forward")
        if reduction not in REDUCTIONS:
            raise ValueError("reduction must be 'none', 'sum' or 'mean'")
        if not targets.is_contiguous():
            targets = targets.contiguous()
        if weights is not None:
            weights = weights.to(dtype=torch.float32).contiguous()
        p = self._problem_for(logits, targets, weights, reduction, ignore_index, label_smoothing, lse)
        n = p.n
        dev = logits.device
        if out is None:
            out = torch.empty((n,) if reduction == "none" else (), dtype=torch.float32, device=dev)
        else:
            want = n if reduction == "none" else 1
            if out.dtype != torch.float32 or out.numel() != want or not out.is_contiguous():
                raise ValueError("out must be a contiguous float32 tensor of %d element(s)" % want)
        lse_out = torch.empty((n,), dtype=torch.float32, device=dev) if lse else None
        for t, what in ((logits, "logits"), (targets, "targets"), (out, "out"),
                        (weights, "weights")):
            if t is not None:
                _check_device(t, what, self.ordinal)
        a = make_args(logits=logits, targets=targets, weights=weights, loss=out, lse=lse_out)
        s = _current_stream(stream, self.ordinal)
        rc = self._lib.xent_forward(self._ctx, ctypes.byref(p), ctypes.byref(a), ctypes.c_void_p(s))
        self._check(rc, "xent_forward")
        return (out, lse_out) if lse else out

    # -- bad targets
    def check_targets(self, stream=None, raise_bad=False):
        """Synchronize the stream and read (and clear) the sticky bad-target flag.

        Returns XENT_OK or XENT_EBADTARGET (raises XentError for EBADTARGET
        too when raise_bad=True); any other status raises XentError.
        """
        s = _current_stream(stream, self.ordinal)
        rc = self._lib.xent_check_targets(self._ctx, ctypes.c_void_p(s))
        if rc == XENT_EBADTARGET and not raise_bad:
            return rc
        self._check(rc, "xent_check_targets")
        return rc


def layout_from_compiler(include_dir, cc="cc"):
    """Compile a tiny C program against include/xent.h and return {struct: (size, {field: (off, size)})}."""
    import subprocess
    import tempfile
    names = {Problem: "xent_problem", Args: "xent_args", DeviceInfo: "xent_device_info"}
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "xent.h"', "int main(void) {"]
    for struct, cname in names.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (struct.__name__, cname))
        for f, _ in struct._fields_:
            lines.append('printf("%s.%s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (struct.__name__, f, cname, f, cname, f))
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        subprocess.run([cc, "-I", include_dir, src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    got = {}
    by_name = {s.__name__: s for s in names}
    for line in out.splitlines():
        key, *vals = line.split()
        if "." in key:
            sname, field = key.split(".")
            got[by_name[sname]][1][field] = (int(vals[0]), int(vals[1]))
        else:
            got[by_name[key]] = (int(vals[0]), {})
    return got


def compare_layout(include_dir=None, cc="cc"):
    """Compile against include/xent.h and compare with the ctypes structures and the table above.
    Returns the compiler's layout; raises AssertionError on any difference."""
    inc = include_dir or os.path.normpath(os.path.join(_HERE, "..", "..", "include"))
    c_layout = layout_from_compiler(inc, cc)
    for struct, (size, fields) in c_layout.items():
        py = (ctypes.sizeof(struct), {f: (getattr(struct, f).offset, getattr(struct, f).size) for f in fields})
        assert py == (size, fields), (struct.__name__, py, (size, fields))
        assert _C_LAYOUT[struct] == (size, fields), (struct.__name__, "table out of date")
    return c_layout


if __name__ == "__main__":
    # python3 -m xent._capi [INCLUDE_DIR]: compare the ctypes layout with what the C compiler says
    import sys
    for struct, (size, fields) in compare_layout(sys.argv[1] if len(sys.argv) > 1 else None).items():
        print("%-10s %3d bytes, %d fields: ctypes == C" % (struct.__name__, size, len(fields)))
