// client/io/data_reader.h
//
// Readers for the three text formats the `okl` tool and the tests replay: CSV rows
// (x_1, ..., x_d, y), LIBSVM rows ("y idx:val ...", sparse, 1-based) and a scalar time
// series turned into examples by time-delay embedding. Each reads the whole file at once
// and returns a dense, row-major Dataset.
//
// Errors are InvalidArgument with a "path:line: what is wrong" message for malformed
// content (a bad or non-finite number, a wrong column count, a bad or duplicate index)
// and the errno-derived code (NotFound for a missing file) when the file cannot be read.
// Every function is thread-compatible: distinct calls share no state.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::Dataset data, okl::ReadLibsvm("a9a_train.txt", 123));
//   for (size_t i = 0; i < data.size(); ++i) {
//     OKL_ASSIGN_OR_RETURN(okl::Observation o, model->Observe(data.row(i), data.y[i]));
//   }
#ifndef OKL_CLIENT_IO_DATA_READER_H_
#define OKL_CLIENT_IO_DATA_READER_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace okl {

// A dense, in-memory set of labelled examples.
struct Dataset {
  size_t dim = 0;
  std::vector<double> x;  // size() * dim, row-major: row i at [i*dim, (i+1)*dim)
  std::vector<double> y;  // one label (or target) per row

  size_t size() const { return y.size(); }
  // The inputs of row i; requires i < size().
  absl::Span<const double> row(size_t i) const {
    return absl::Span<const double>(x.data() + i * dim, dim);
  }
};

// Reads comma-separated rows "x_1,...,x_d,y". Fields may carry surrounding spaces or
// tabs; blank lines and lines whose first non-blank character is '#' are skipped.
// `dim` 0 infers the dimension from the first row (its column count minus one); else
// every row must have exactly dim + 1 columns.
absl::StatusOr<Dataset> ReadCsv(absl::string_view path, size_t dim);

// Reads LIBSVM rows "y idx:val idx:val ..." with 1-based indices; absent indices are 0.
// Indices need not be increasing, but an index may appear once per row. `dim` 0 takes
// the largest index in the file as the dimension; else an index above dim is an error
// (a file whose largest index is below dim is fine: its trailing inputs are zero).
// Blank lines and lines whose first non-blank character is '#' are skipped.
absl::StatusOr<Dataset> ReadLibsvm(absl::string_view path, size_t dim);

// Reads a scalar series s_0, ..., s_{N-1}, one value per line (blank and '#' lines
// skipped), and embeds it with `embedding` = L >= 1 lags: row n (0 <= n < N-1) has
// inputs [s_n, s_{n-1}, ..., s_{n-L+1}] (zeros before s_0) and target s_{n+1}, so N
// values give N-1 rows of dimension L: one-step-ahead prediction.
absl::StatusOr<Dataset> ReadSeries(absl::string_view path, size_t embedding);

}  // namespace okl

#endif  // OKL_CLIENT_IO_DATA_READER_H_
