// tests/proto/inputs_test.cc

#include "proto/inputs.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

v1::Vector Dense(std::vector<double> values) {
  v1::Vector v;
  v.mutable_values()->Assign(values.begin(), values.end());
  return v;
}

v1::Vector Sparse(std::vector<uint32_t> indices, std::vector<double> values) {
  v1::Vector v;
  v.mutable_indices()->Assign(indices.begin(), indices.end());
  v.mutable_values()->Assign(values.begin(), values.end());
  return v;
}

absl::Status Densify(const v1::Vector& v, std::vector<double>* out) {
  return DensifyVector(v, absl::MakeSpan(*out));
}

TEST(CompactVectorTest, SendsTheSmallerFormAndDensifiesBack) {
  const std::vector<double> mostly_zero = {0, 0, 2.5, 0, 0, 0, -1, 0, 0};
  const std::vector<double> mostly_set = {1, 2, 0, 4, 5, 6};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> with_nan = {0, nan, 0, 0};
  const std::vector<double> all_zero = {0, -0.0, 0};
  for (const std::vector<double>* x : {&mostly_zero, &mostly_set, &with_nan, &all_zero}) {
    v1::Vector vector;
    ToCompactVector(*x, &vector);
    std::vector<double> back(x->size());
    ASSERT_TRUE(DensifyVector(vector, absl::MakeSpan(back)).ok());
    for (size_t j = 0; j < x->size(); ++j) {
      EXPECT_EQ(std::bit_cast<uint64_t>(back[j]), std::bit_cast<uint64_t>((*x)[j])) << j;
    }
  }
  v1::Vector sparse;
  ToCompactVector(mostly_zero, &sparse);
  EXPECT_THAT(sparse.indices(), ::testing::ElementsAre(2u, 6u));
  EXPECT_THAT(sparse.values(), ::testing::ElementsAre(2.5, -1.0));
  v1::Vector dense;
  ToCompactVector(mostly_set, &dense);
  EXPECT_TRUE(dense.indices().empty());
  EXPECT_EQ(dense.values_size(), 6);
  // All zeros go dense: a sparse vector without entries would be an empty dense one.
  v1::Vector zeros;
  ToCompactVector(all_zero, &zeros);
  EXPECT_EQ(zeros.values_size(), 3);
  // A NaN is a non-zero: it reaches the server, which rejects it.
  v1::Vector nan_vector;
  ToCompactVector(with_nan, &nan_vector);
  EXPECT_THAT(nan_vector.indices(), ::testing::ElementsAre(1u));
}

TEST(DensifyVectorTest, CopiesADenseVectorOfTheModelsDim) {
  std::vector<double> out(3, -7.0);
  ASSERT_TRUE(Densify(Dense({1.5, -2, 0.25}), &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(1.5, -2, 0.25));
}

TEST(DensifyVectorTest, RejectsADenseVectorOfAnotherLength) {
  std::vector<double> out(3);
  absl::Status status = Densify(Dense({1, 2}), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2 values but the model's dim is 3"));
  // An unset vector is a dense one with no values.
  status = Densify(v1::Vector(), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(DensifyVectorTest, FillsASparseVectorWithZerosElsewhere) {
  std::vector<double> out(5, -7.0);
  ASSERT_TRUE(Densify(Sparse({0, 3}, {2.5, -1}), &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(2.5, 0, 0, -1, 0));
  ASSERT_TRUE(Densify(Sparse({4}, {9}), &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0, 0, 0, 0, 9));
}

TEST(DensifyVectorTest, RejectsBadSparseIndices) {
  std::vector<double> out(4);
  absl::Status status = Densify(Sparse({1, 4}, {1, 2}), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("indices[1] = 4 is not below the model's dim 4"));

  status = Densify(Sparse({2, 1}, {1, 2}), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("strictly increasing: indices[1] = 1 follows 2"));

  status = Densify(Sparse({2, 2}, {1, 2}), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("strictly increasing"));

  status = Densify(Sparse({0, 1}, {1}), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2 indices but 1 values"));
}

TEST(DensifyVectorTest, LeavesNonFiniteValuesToTheModel) {
  std::vector<double> out(2);
  ASSERT_TRUE(Densify(Sparse({1}, {std::numeric_limits<double>::infinity()}), &out).ok());
  EXPECT_TRUE(std::isinf(out[1]));
}

TEST(ConvertObserveRequestTest, FlattensExamplesInOrder) {
  v1::ObserveRequest request;
  v1::Example* a = request.add_examples();
  *a->mutable_x() = Dense({1, 2, 3});
  a->set_y(0.5);
  v1::Example* b = request.add_examples();
  *b->mutable_x() = Sparse({1}, {-4});
  b->set_y(-1);
  ExampleBatch batch;
  ASSERT_TRUE(FromProto(request, 3, &batch).ok());
  EXPECT_THAT(batch.xs, ::testing::ElementsAre(1, 2, 3, 0, -4, 0));
  EXPECT_THAT(batch.ys, ::testing::ElementsAre(0.5, -1));

  // A second conversion replaces the batch.
  request.mutable_examples()->RemoveLast();
  ASSERT_TRUE(FromProto(request, 3, &batch).ok());
  EXPECT_THAT(batch.xs, ::testing::ElementsAre(1, 2, 3));
  EXPECT_THAT(batch.ys, ::testing::ElementsAre(0.5));
}

TEST(ConvertObserveRequestTest, NamesTheBadExample) {
  v1::ObserveRequest request;
  *request.add_examples()->mutable_x() = Dense({1, 2});
  *request.add_examples()->mutable_x() = Sparse({7}, {1});
  ExampleBatch batch;
  absl::Status status = FromProto(request, 2, &batch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("examples[1].x: sparse index"));
}

TEST(ConvertPredictRequestTest, FlattensInputsAndNamesTheBadOne) {
  v1::PredictRequest request;
  *request.add_inputs() = Dense({1, 2});
  *request.add_inputs() = Sparse({0}, {3});
  std::vector<double> xs;
  ASSERT_TRUE(FromProto(request, 2, &xs).ok());
  EXPECT_THAT(xs, ::testing::ElementsAre(1, 2, 3, 0));

  *request.add_inputs() = Dense({1, 2, 3});
  absl::Status status = FromProto(request, 2, &xs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("inputs[2]: dense vector has 3 values"));
}

TEST(ConvertObserveResponseTest, AppendsPredictionsAndLossesInOrder) {
  v1::ObserveResponse response;
  const std::vector<Observation> first = {{.prediction = 1, .loss = 2}};
  const std::vector<Observation> second = {{.prediction = 3, .loss = 4},
                                           {.prediction = 5, .loss = 6}};
  AppendToProto(first, &response);
  AppendToProto(second, &response);
  EXPECT_THAT(response.predictions(), ::testing::ElementsAre(1, 3, 5));
  EXPECT_THAT(response.losses(), ::testing::ElementsAre(2, 4, 6));
}

// --- Bounded request conversion ----------------------------------------------------

TEST(BoundedRequestTest, SparseRequestsAreCheckedAndBoundedBeforeAnythingIsAllocated) {
  // 500 one-index sparse examples at dim 65536: 13 KB on the wire, 262 MB dense.
  v1::ObserveRequest request;
  for (int i = 0; i < 500; ++i) {
    v1::Example* example = request.add_examples();
    example->mutable_x()->add_indices(static_cast<uint32_t>(i));
    example->mutable_x()->add_values(1.0);
    example->set_y(1.0);
  }
  ExampleBatch batch;
  absl::Status status = FromProto(request, 65536, &batch, /*max_bytes=*/64 << 20);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_request_bytes"));
  EXPECT_EQ(batch.xs.capacity(), 0u);  // nothing was allocated
  EXPECT_EQ(DenseBatchBytes(500, 65536), 500u * 65537u * 8u);
  // Within the bound it converts; a bad index anywhere is found before the size.
  EXPECT_TRUE(FromProto(request, 65536, &batch, DenseBatchBytes(500, 65536)).ok());
  EXPECT_EQ(batch.xs.size(), 500u * 65536u);
  request.mutable_examples(499)->mutable_x()->set_indices(0, 70000);
  ExampleBatch untouched;
  status = FromProto(request, 65536, &untouched, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("examples[499].x"));
  EXPECT_EQ(untouched.xs.capacity(), 0u);

  v1::PredictRequest predict;
  for (int i = 0; i < 10; ++i) {
    v1::Vector* input = predict.add_inputs();
    input->add_indices(3);
    input->add_values(2.0);
  }
  std::vector<double> xs;
  status = FromProto(predict, 1000, &xs, DenseBatchBytes(10, 1000) - 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(xs.capacity(), 0u);
  ASSERT_TRUE(FromProto(predict, 1000, &xs, DenseBatchBytes(10, 1000)).ok());
  EXPECT_EQ(xs[3], 2.0);
  EXPECT_EQ(xs[1000 + 3], 2.0);
}

// The sparse form (for models with sparse storage) keeps each vector's non-zeros, so a
// request costs what it carries whatever the dim, and is checked and bounded the same way.
TEST(BoundedRequestTest, SparseFormKeepsTheNonZerosAndIsBoundedByThem) {
  v1::ObserveRequest request;
  for (int i = 0; i < 3; ++i) {
    v1::Example* example = request.add_examples();
    example->mutable_x()->add_indices(static_cast<uint32_t>(i));
    example->mutable_x()->add_indices(16000000);
    example->mutable_x()->add_values(1.0 + i);
    example->mutable_x()->add_values(-1.0);
    example->set_y(i % 2 == 0 ? 1.0 : -1.0);
  }
  // A dense vector's zeros are dropped.
  v1::Example* dense = request.add_examples();
  for (const double v : {0.0, 2.5, 0.0}) dense->mutable_x()->add_values(v);
  dense->set_y(1.0);
  SparseExampleBatch batch;
  ASSERT_TRUE(FromProto(request, 3, &batch).code() == absl::StatusCode::kInvalidArgument);
  request.mutable_examples()->RemoveLast();  // the dense vector has 3 values, not dim
  ASSERT_TRUE(FromProto(request, 1u << 24, &batch).ok());
  ASSERT_EQ(batch.xs.size(), 3u);
  EXPECT_THAT(batch.xs.Row(1).indices, ::testing::ElementsAre(1u, 16000000u));
  EXPECT_THAT(batch.xs.Row(1).values, ::testing::ElementsAre(2.0, -1.0));
  EXPECT_THAT(batch.ys, ::testing::ElementsAre(1.0, -1.0, 1.0));

  v1::PredictRequest predict;
  v1::Vector* input = predict.add_inputs();
  for (const double v : {0.0, 2.5, 0.0}) input->add_values(v);
  SparseRows xs;
  ASSERT_TRUE(FromProto(predict, 3, &xs).ok());
  ASSERT_EQ(xs.size(), 1u);
  EXPECT_THAT(xs.Row(0).indices, ::testing::ElementsAre(1u));

  // Bounded by the entries the request carries: 6 non-zeros and 3 labels.
  EXPECT_EQ(SparseBatchBytes(3, 6), 6u * 12u + 3u * 16u);
  SparseExampleBatch untouched;
  absl::Status status = FromProto(request, 1u << 24, &untouched, SparseBatchBytes(3, 6) - 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_request_bytes"));
  EXPECT_EQ(untouched.xs.indices.capacity(), 0u);
  request.mutable_examples(2)->mutable_x()->set_indices(1, 1u << 24);
  status = FromProto(request, 1u << 24, &untouched);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("examples[2].x"));
}

TEST(DecodedRequestTest, DecodesForTheModelsLayoutAndSaysWhenAnotherNeedsItAgain) {
  v1::ObserveRequest observe;
  auto* example = observe.add_examples();
  *example->mutable_x() = Sparse({1}, {2.5});
  example->set_y(-1);
  ModelConfig dense3;
  dense3.dim = 3;
  DecodedRequest decoded;
  EXPECT_FALSE(decoded.Fits(dense3));  // nothing decoded yet
  ASSERT_TRUE(decoded.Decode(observe, dense3, SIZE_MAX).ok());
  EXPECT_TRUE(decoded.Fits(dense3));
  EXPECT_FALSE(decoded.inputs().sparse());
  EXPECT_THAT(decoded.inputs().DenseRow(0), ::testing::ElementsAre(0, 2.5, 0));
  EXPECT_THAT(decoded.ys(), ::testing::ElementsAre(-1));

  // A model of another dim, or with sparse storage, is another layout.
  ModelConfig dense4 = dense3;
  dense4.dim = 4;
  EXPECT_FALSE(decoded.Fits(dense4));
  ModelConfig sparse3 = dense3;
  sparse3.sparse.max_nonzeros = 2;
  EXPECT_FALSE(decoded.Fits(sparse3));
  ASSERT_TRUE(decoded.Decode(observe, sparse3, SIZE_MAX).ok());
  EXPECT_TRUE(decoded.Fits(sparse3));
  ASSERT_TRUE(decoded.inputs().sparse());
  EXPECT_EQ(decoded.inputs().size(), 1u);
  EXPECT_THAT(decoded.ys(), ::testing::ElementsAre(-1));

  // A Predict has no labels; a failed decode fits nothing.
  v1::PredictRequest predict;
  *predict.add_inputs() = Dense({1, 2, 3});
  ASSERT_TRUE(decoded.Decode(predict, dense3, SIZE_MAX).ok());
  EXPECT_THAT(decoded.inputs().DenseRow(0), ::testing::ElementsAre(1, 2, 3));
  EXPECT_TRUE(decoded.ys().empty());
  EXPECT_EQ(decoded.Decode(predict, dense4, SIZE_MAX).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(decoded.Fits(dense4));
  EXPECT_FALSE(decoded.Fits(dense3));
}

}  // namespace
}  // namespace okl
