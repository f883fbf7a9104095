// core/merge.h
//
// Merging two terms of a gaussian kernel expansion into one (Wang, Crammer and Vucetic,
// "Breaking the curse of kernelization", JMLR 13, 2012, section 6.3): the MERGE budget
// policy's arithmetic. Terms alpha_m k(x_m, .) and alpha_n k(x_n, .) of the same sign,
// |alpha_m| <= |alpha_n|, are replaced by alpha_z k(z, .) with z = h x_m + (1 - h) x_n on
// the segment between them. For k(x, x') = exp(-gamma |x - x'|^2) and k_mn = k(x_m, x_n):
//   k(x_m, z) = k_mn^((1-h)^2),  k(x_n, z) = k_mn^(h^2),
//   the best coefficient for a given z is alpha_z = alpha_m k(x_m, z) + alpha_n k(x_n, z),
//   and the RKHS norm lost, |alpha_m phi(x_m) + alpha_n phi(x_n) - alpha_z phi(z)|^2, is
//   alpha_m^2 + alpha_n^2 + 2 alpha_m alpha_n k_mn - alpha_z^2.
// So h maximises g(h) = a k_mn^((1-h)^2) + (1 - a) k_mn^(h^2), a = alpha_m / (alpha_m +
// alpha_n) in (0, 1/2]. Since g(h) >= g(1 - h) for h <= 1/2 when a <= 1/2, the maximum
// lies in [0, 1/2] (z nearer the larger term); h = 0 (z = x_n) already loses no more than
// removing term m would, alpha_m^2 (1 - k_mn^2) <= alpha_m^2.
//
// MergeGaussianPair finds h from a grid of 17 points on [0, 1/2], refined by Newton's method
// on g's slope to the last bit (the paper uses golden-section search): the global maximum
// whenever g's peaks are further apart than the grid step. EstimateGaussianMergeLoss reads max_h g from a table built once per process, to
// rank many candidates for the price of a table lookup each (no exp), with an error bound
// per table cell measured when the table is built (once per process, ~15 ms). All functions are thread-safe.
//
// Example:
//   okl::GaussianMerge merge = okl::MergeGaussianPair(0.1, 0.4, /*k_mn=*/0.8);
//   // z = merge.h * x_m + (1 - merge.h) * x_n, with coefficient merge.coefficient.
#ifndef OKL_CORE_MERGE_H_
#define OKL_CORE_MERGE_H_

namespace okl {

struct GaussianMerge {
  double h = 0.0;            // z = h x_m + (1 - h) x_n, h in [0, 1/2]
  double coefficient = 0.0;  // alpha_z
  double loss = 0.0;         // the squared RKHS norm the merge loses, >= 0
  double k_mz = 0.0;         // k(x_m, z) = k_mn^((1-h)^2)
  double k_nz = 0.0;         // k(x_n, z) = k_mn^(h^2)
};

// Requires alpha_m and alpha_n of the same sign, |alpha_m| <= |alpha_n|, alpha_n != 0,
// and k_mn in [0, 1].
GaussianMerge MergeGaussianPair(double alpha_m, double alpha_n, double k_mn);

struct MergeLossEstimate {
  double loss = 0.0;   // within `error` of MergeGaussianPair(...).loss
  double error = 0.0;  // at most ~1% of alpha_m^2 (removal's loss), far less in most cells
};

// The loss of MergeGaussianPair(alpha_m, alpha_n, k_mn) and a bound on the estimate's
// error. Same requirements.
MergeLossEstimate EstimateGaussianMergeLoss(double alpha_m, double alpha_n, double k_mn);

// The same for terms with a coefficient per class, alpha_m and alpha_n in R^K (a multi-class
// expansion, core/multiclass_norma.h): alpha_z = alpha_m k_mn^((1-h)^2) + alpha_n
// k_mn^(h^2), and h in [0, 1] maximises
//   F(h) = |alpha_z|^2 = a k_mn^(2(1-h)^2) + b k_mn^(2h^2) + 2c k_mn^((1-h)^2 + h^2),
// a = |alpha_m|^2, b = |alpha_n|^2, c = <alpha_m, alpha_n>; the norm lost is
// a + b + 2c k_mn - F(h). F need not be unimodal when the two point different ways, so h
// comes from a grid of 33 points on [0, 1], refined by bisection on F's slope beside the
// best, to the last bit. With K = 1 it is the scalar merge above (which searches only [0, 1/2], where the
// maximum lies when the signs agree).
struct ClassMerge {
  double h = 0.0;
  double loss = 0.0;  // a + b + 2c k_mn - F(h), >= 0
  double k_mz = 0.0;  // k_mn^((1-h)^2)
  double k_nz = 0.0;  // k_mn^(h^2)
};
// Requires a, b >= 0, c^2 <= a b (up to rounding) and k_mn in [0, 1].
ClassMerge MergeClassPair(double a, double b, double c, double k_mn);

// A lower bound on MergeClassPair(a, b, c, k_mn).loss that costs two table lookups (no
// exp), for ranking many partners: with alpha_n = beta u + w, u = alpha_m / |alpha_m|,
// the loss is at least the scalar merge loss of |alpha_m| and beta (the component of
// alpha_n along alpha_m), and at least a + b + 2c k_mn - max_h (|alpha_m| k_mn^((1-h)^2) +
// |alpha_n| k_mn^(h^2))^2 (Cauchy-Schwarz). Requires 0 < a <= b.
double ClassMergeLossLowerBound(double a, double b, double c, double k_mn);

}  // namespace okl

#endif  // OKL_CORE_MERGE_H_
