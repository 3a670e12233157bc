// xent_torch.cpp — eager mode's fused loss as one torch operator with a C++ autograd node.
//
// torch.ops.xent_cpp.fused(input, target, weight, context, ignore_index, reduction, label_smoothing,
// z_loss, softcap) -> loss: the fused plan's kernels write the loss and the gradient in the forward;
// the backward rescales that gradient by the loss's upstream gradient. It is what xent._ops'
// _FusedEager does, without Python on the step's path: the autograd engine runs the backward in
// C++ (no interpreter lock taken from its thread) and the launches skip ctypes.
// torch.ops.xent_cpp.fused_inplace (the same arguments) is _FusedInplace's: the gradient is written
// over the logits' own storage, in their layout, and is what the backward rescales and returns.
//
// Plans are looked up, never built, here: xent_plan_lookup never compiles or synchronizes, so the op
// is safe under CUDA graph capture. A miss raises an error starting "xent: no plan"; xent._ops then
// builds the forward's and the backward's plans (where it can say what capture forbids) and calls
// again. `context` is the xent_context* of the tensors' device, from xent._ops.
//
// The library links torch's own C++ libraries and libxent, and holds no Python: torch.ops.load_library
// loads it into any interpreter running the torch it was compiled against.

#include <torch/library.h>
#include <torch/csrc/autograd/custom_function.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "xent.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using at::Tensor;

xent_dtype logit_dtype(const Tensor &x) {
    switch (x.scalar_type()) {
    case at::kFloat: return XENT_F32;
    case at::kHalf: return XENT_F16;
    case at::kBFloat16: return XENT_BF16;
    default: TORCH_CHECK(false, "xent: logits must be float32, float16 or bfloat16, got ", x.scalar_type());
    }
}

void *stream_of(const Tensor &x) {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(x.device()).native_handle();
}

xent_plan *plan_for(xent_context *ctx, const xent_problem &p) {
    xent_plan *plan = nullptr;
    const int rc = xent_plan_lookup(ctx, &p, &plan);
    TORCH_CHECK(rc != XENT_ENOTFOUND, "xent: no plan for this problem yet");
    TORCH_CHECK(rc == XENT_OK, "xent: xent_plan_lookup: ", xent_errstr(rc), ": ", xent_errmsg(ctx));
    return plan;
}

void launch(xent_context *ctx, xent_plan *plan, const Tensor &on, const xent_args &a) {
    const int rc = xent_plan_launch(plan, stream_of(on), &a);
    TORCH_CHECK(rc == XENT_OK, "xent: xent_plan_launch: ", xent_errstr(rc), ": ", xent_errmsg(ctx));
}

// The row stride xent takes for x's rows (xent._ops._row_stride): c for one row. Rows that share
// memory are refused: a kernel would read past them, and an in-place gradient would write over them.
int64_t row_stride_of(const Tensor &x) {
    const int64_t n = x.size(0), c = x.size(1), rs = x.stride(0);
    TORCH_CHECK(n == 1 || rs >= c, "xent: rows that share memory (stride(0) = ", rs, " < C = ", c, ")");
    return n == 1 ? c : rs;
}

// The fused problem of x's rows, whose gradient has the same row stride.
xent_problem fused_problem(const Tensor &x, const Tensor &target, bool weighted, int64_t ignore_index,
                           int64_t reduction, double label_smoothing, double z_loss, double softcap) {
    // An fp16 gradient written at dloss 1 and rescaled after loses what a loss scale would have kept
    // (p_j / n under fp16's smallest subnormal): xent.cross_entropy computes it in the backward instead.
    TORCH_CHECK(x.scalar_type() != at::kHalf, "xent: the fused operator takes float32 or bfloat16 logits, not "
                "float16, whose gradient it would round at dloss 1 (xent.cross_entropy computes an fp16 "
                "gradient in the backward)");
    xent_problem p;
    xent_problem_init(&p, x.size(0), x.size(1));
    p.row_stride = row_stride_of(x);
    p.logits = logit_dtype(x);
    p.targets = target.scalar_type() == at::kInt ? XENT_I32 : XENT_I64;
    p.reduction = static_cast<xent_reduction>(reduction);
    p.ignore_index = ignore_index;
    p.label_smoothing = static_cast<float>(label_smoothing);
    p.has_weights = weighted;
    p.op = XENT_OP_FUSED;
    p.z_loss = static_cast<float>(z_loss);
    p.softcap = static_cast<float>(softcap);
    return p;
}

// Launches the fused plan of x's rows, the gradient into grad; returns the loss and keeps grad for
// the backward. Where grad lies over x, x's version counter is bumped after the launch (a kernel's
// write is no torch op) and before grad is saved: another node that saved x raises on it, not this one.
Tensor fused_forward(AutogradContext *actx, const Tensor &x, const Tensor &grad, const Tensor &target,
                     const c10::optional<Tensor> &weight, int64_t context, int64_t ignore_index,
                     int64_t reduction, double label_smoothing, double z_loss, double softcap) {
    auto *ctx = reinterpret_cast<xent_context *>(context);
    const xent_problem p = fused_problem(x, target, weight.has_value(), ignore_index, reduction,
                                         label_smoothing, z_loss, softcap);
    xent_plan *plan = plan_for(ctx, p);
    const int64_t n = x.size(0);
    Tensor loss = reduction == XENT_REDUCE_NONE ? at::empty({n}, x.options().dtype(at::kFloat))
                                                : at::empty({}, x.options().dtype(at::kFloat));
    xent_args a = {};
    a.logits = x.data_ptr();
    a.targets = target.data_ptr();
    a.weights = weight.has_value() ? weight->data_ptr<float>() : nullptr;
    a.loss = loss.data_ptr<float>();
    a.grad = grad.data_ptr();
    launch(ctx, plan, x, a);
    if (grad.data_ptr() == x.data_ptr()) torch::autograd::impl::bump_version(x);
    actx->save_for_backward({grad});
    actx->saved_data["context"] = context;
    actx->saved_data["reduction"] = reduction;
    actx->set_materialize_grads(false);
    return loss;
}

// The kept gradient times the loss's upstream gradient, in place, returned as the logits'.
variable_list fused_backward(AutogradContext *actx, const variable_list &grad_outputs) {
    Tensor grad = actx->get_saved_variables()[0];
    const Tensor &g = grad_outputs[0];
    if (!g.defined()) return {at::zeros_like(grad), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(),
                              Tensor(), Tensor()};
    auto *ctx = reinterpret_cast<xent_context *>(actx->saved_data["context"].toInt());
    const bool rows = actx->saved_data["reduction"].toInt() == XENT_REDUCE_NONE;
    // the upstream gradient as the rescale takes it: contiguous fp32, n floats (none) or 1
    const Tensor dl = g.scalar_type() == at::kFloat && g.is_contiguous() ? g : g.to(at::kFloat).contiguous();
    xent_problem p;
    xent_problem_init(&p, grad.size(0), grad.size(1));
    p.row_stride = row_stride_of(grad);
    p.logits = logit_dtype(grad);
    p.reduction = rows ? XENT_REDUCE_NONE : XENT_REDUCE_MEAN;
    p.op = XENT_OP_RESCALE;
    xent_args a = {};
    a.logits = grad.data_ptr();
    a.grad = grad.data_ptr();
    a.dloss = dl.data_ptr<float>();
    launch(ctx, plan_for(ctx, p), grad, a);
    return {grad, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
}

struct Fused : public torch::autograd::Function<Fused> {
    static Tensor forward(AutogradContext *actx, const Tensor &input, const Tensor &target,
                          const c10::optional<Tensor> &weight, int64_t context, int64_t ignore_index,
                          int64_t reduction, double label_smoothing, double z_loss, double softcap) {
        // the new gradient must share the logits' row stride and 16-byte phase (xent._ops._aligned)
        const bool aligned = input.stride(0) == input.size(1) && reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 == 0;
        const Tensor x = aligned ? input : input.is_contiguous() ? input.clone() : input.contiguous();
        return fused_forward(actx, x, at::empty_like(x, at::MemoryFormat::Contiguous), target, weight, context,
                             ignore_index, reduction, label_smoothing, z_loss, softcap);
    }

    static variable_list backward(AutogradContext *actx, variable_list grad_outputs) {
        return fused_backward(actx, grad_outputs);
    }
};

// The gradient over the logits, which the caller gave up by asking for it: a detached view of their
// storage, since the gradient autograd gives the input cannot be the input itself, which requires grad.
struct FusedInplace : public torch::autograd::Function<FusedInplace> {
    static Tensor forward(AutogradContext *actx, const Tensor &input, const Tensor &target,
                          const c10::optional<Tensor> &weight, int64_t context, int64_t ignore_index,
                          int64_t reduction, double label_smoothing, double z_loss, double softcap) {
        return fused_forward(actx, input, input.detach(), target, weight, context, ignore_index, reduction,
                             label_smoothing, z_loss, softcap);
    }

    static variable_list backward(AutogradContext *actx, variable_list grad_outputs) {
        return fused_backward(actx, grad_outputs);
    }
};

Tensor fused(const Tensor &input, const Tensor &target, const c10::optional<Tensor> &weight, int64_t context,
             int64_t ignore_index, int64_t reduction, double label_smoothing, double z_loss, double softcap) {
    return Fused::apply(input, target, weight, context, ignore_index, reduction, label_smoothing, z_loss, softcap);
}

Tensor fused_inplace(const Tensor &input, const Tensor &target, const c10::optional<Tensor> &weight,
                     int64_t context, int64_t ignore_index, int64_t reduction, double label_smoothing,
                     double z_loss, double softcap) {
    return FusedInplace::apply(input, target, weight, context, ignore_index, reduction, label_smoothing, z_loss,
                               softcap);
}

} // namespace

TORCH_LIBRARY(xent_cpp, m) {
    m.def("fused(Tensor input, Tensor target, Tensor? weight, int context, int ignore_index, int reduction, "
          "float label_smoothing, float z_loss, float softcap) -> Tensor");
    m.def("fused_inplace(Tensor(a!) input, Tensor target, Tensor? weight, int context, int ignore_index, "
          "int reduction, float label_smoothing, float z_loss, float softcap) -> Tensor");
}

// Autograd for CUDA tensors: the op is its own autograd node, and launches on the tensors' memory.
TORCH_LIBRARY_IMPL(xent_cpp, AutogradCUDA, m) {
    m.impl("fused", fused);
    m.impl("fused_inplace", fused_inplace);
}
