// Without the CUDA backend no tensor can live on a GPU (Tensor::empty on cuda:N already fails in
// cuda_allocator), so these are never reached; they exist so that core/gpu.cpp links the same way
// in every build, and say why if something does reach them.
#ifndef EMBER_WITH_CUDA
#include "core/cuda_ops.h"
#include "core/error.h"

namespace ember::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) { fail("{}: this build of Ember has no CUDA backend", what); }
}  // namespace

void synchronize(int) { no_cuda("synchronize"); }
int64_t cudamalloc_count(int) { no_cuda("cudamalloc_count"); }
void copy(int, const Shape8&, const Operand&, const Operand&) { no_cuda("copy"); }
void fill(int, const Shape8&, const Operand&, double) { no_cuda("fill_"); }
void add_into(int, const Shape8&, const Operand&, const Operand&, double) { no_cuda("add_"); }
void scale(int, const Shape8&, const Operand&, double) { no_cuda("mul_"); }
void binary(int, BinaryOp, const Shape8&, const Operand&, const Operand&, const Operand&) { no_cuda("binary op"); }
void select(int, const Shape8&, const Operand&, const Operand&, const Operand&, const Operand&) { no_cuda("where"); }
void dropout(int, bool, const void*, void*, int64_t, uint64_t, uint64_t, uint64_t, double) { no_cuda("dropout"); }
void random_fill(int, bool, void*, int64_t, bool, uint64_t, uint64_t, double, double) { no_cuda("random fill"); }
void reduce_rows(int, int, ReduceKind, const void*, void*, int64_t, int64_t) { no_cuda("reduce"); }
void argmax_rows(int, int, const void*, int64_t*, int64_t, int64_t) { no_cuda("argmax"); }
void softmax_forward(int, bool, const void*, void*, int64_t, int64_t, bool) { no_cuda("softmax"); }
void softmax_backward(int, bool, const void*, const void*, void*, int64_t, int64_t, bool) { no_cuda("softmax"); }
bool cudnn_available() { return false; }
void set_softmax_cudnn(bool on) {
  if (on) no_cuda("softmax (cuDNN)");
}
bool softmax_cudnn() { return false; }
void cudnn_softmax_forward(int, bool, const void*, void*, int64_t, int64_t, bool) { no_cuda("softmax (cuDNN)"); }
void cudnn_softmax_backward(int, bool, const void*, const void*, void*, int64_t, int64_t, bool) {
  no_cuda("softmax (cuDNN)");
}
void layer_norm_forward(int, bool, const void*, const void*, const void*, void*, double*, double*, int64_t, int64_t,
                        double) {
  no_cuda("layer_norm");
}
int64_t layer_norm_chunks(int64_t) { no_cuda("layer_norm"); }
void layer_norm_backward(int, bool, const void*, const void*, const double*, const double*, const void*, void*, void*,
                         void*, int64_t, int64_t, double*) {
  no_cuda("layer_norm");
}
void cross_entropy_forward(int, bool, const void*, const int64_t*, int64_t, int64_t, int64_t, void*, void*, double*) {
  no_cuda("cross_entropy");
}
void cross_entropy_backward(int, bool, const void*, const int64_t*, const void*, const void*, void*, int64_t, int64_t,
                            int64_t, double) {
  no_cuda("cross_entropy");
}
void set_attention_fused(bool) {}
bool attention_fused() { return false; }
int64_t attention_max_head_dim() { return 0; }
void attention_forward(int, bool, const void*, const bool*, int64_t, int64_t, int64_t, int64_t, bool, void*, double*,
                       void*) {
  no_cuda("attention");
}
void attention_backward(int, bool, const void*, const bool*, int64_t, int64_t, int64_t, int64_t, bool, const void*,
                        const void*, const double*, double*, void*) {
  no_cuda("attention");
}
void embedding_forward(int, bool, const void*, int64_t, int64_t, const int64_t*, int64_t, int64_t, void*) {
  no_cuda("embedding");
}
void embedding_backward(int, bool, const void*, const int64_t*, const int64_t*, const int64_t*, int64_t, int64_t,
                        void*) {
  no_cuda("embedding");
}
void gemm(int, bool, int64_t, int64_t, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, const void*, int64_t,
          int64_t, int64_t, double, void*, int64_t, int64_t) {
  no_cuda("gemm");
}
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void adam_step(int, bool, const TensorList&, const AdamHyper&) { no_cuda("AdamW"); }
void sgd_step(int, bool, const TensorList&, const SgdHyper&) { no_cuda("SGD"); }
int64_t sum_squares_partials(const TensorList&) { no_cuda("clip_grad_norm"); }
void sum_squares(int, bool, const TensorList&, double*) { no_cuda("clip_grad_norm"); }
void scale_all(int, bool, const TensorList&, double) { no_cuda("clip_grad_norm"); }

}  // namespace ember::cuda
#endif
