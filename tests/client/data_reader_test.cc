// tests/client/data_reader_test.cc

#include "client/io/data_reader.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Writes `contents` to a fresh file under the test's temporary directory.
std::string WriteTemp(const std::string& contents) {
  static std::atomic<int> counter{0};
  const std::string path = absl::StrCat(::testing::TempDir(), "/data_reader_test_",
                                        ::getpid(), "_", counter++, ".txt");
  std::ofstream out(path, std::ios::binary);
  out << contents;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

void ExpectError(const absl::StatusOr<Dataset>& data, const std::string& path, int line,
                 const std::string& what) {
  ASSERT_FALSE(data.ok()) << "expected an error about " << what;
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  EXPECT_THAT(data.status().message(), HasSubstr(absl::StrCat(path, ":", line, ": ")))
      << data.status();
  EXPECT_THAT(data.status().message(), HasSubstr(what)) << data.status();
}

// --- CSV -------------------------------------------------------------------------

TEST(ReadCsvTest, InfersTheDimensionAndSkipsCommentsAndBlankLines) {
  const std::string path =
      WriteTemp("# x1,x2,y\n1,2,3\n\n  # indented comment\n -4.5 , 5e-1,\t+6\n   \n");
  absl::StatusOr<Dataset> data = ReadCsv(path, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 2u);
  ASSERT_EQ(data->size(), 2u);
  EXPECT_THAT(data->x, ElementsAre(1, 2, -4.5, 0.5));
  EXPECT_THAT(data->y, ElementsAre(3, 6));
  EXPECT_THAT(data->row(1), ElementsAre(-4.5, 0.5));
}

TEST(ReadCsvTest, AcceptsCrLfAndAMissingFinalNewline) {
  const std::string path = WriteTemp("1,2\r\n3,4");
  absl::StatusOr<Dataset> data = ReadCsv(path, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->x, ElementsAre(1, 3));
  EXPECT_THAT(data->y, ElementsAre(2, 4));
}

TEST(ReadCsvTest, ReadsNumbersExactly) {
  // %.17g output of doubles must come back bit for bit.
  const std::string path =
      WriteTemp("0.10000000000000001,-0.33333333333333331,4.9406564584124654e-324\n");
  absl::StatusOr<Dataset> data = ReadCsv(path, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->x[0], 0.1);
  EXPECT_EQ(data->x[1], -1.0 / 3);
  EXPECT_EQ(data->y[0], 4.9406564584124654e-324);
}

TEST(ReadCsvTest, RejectsAWrongColumnCountWithItsLine) {
  const std::string path = WriteTemp("# header\n1,2,3\n4,5\n");
  ExpectError(ReadCsv(path, 0), path, 3,
              "expected 3 columns (2 inputs and a label), got 2");
  ExpectError(ReadCsv(path, 3), path, 2,
              "expected 4 columns (3 inputs and a label), got 3");
}

TEST(ReadCsvTest, RejectsASingleColumnWhenInferring) {
  const std::string path = WriteTemp("1\n");
  ExpectError(ReadCsv(path, 0), path, 1, "at least one input and a label");
}

TEST(ReadCsvTest, RejectsBadNumbers) {
  const std::string path = WriteTemp("1,2,3\n1,abc,3\n");
  ExpectError(ReadCsv(path, 2), path, 2, "bad number 'abc' in column 2");
  const std::string empty_field = WriteTemp("1,,3\n");
  ExpectError(ReadCsv(empty_field, 2), empty_field, 1, "bad number '' in column 2");
  const std::string trailing = WriteTemp("1,2x,3\n");
  ExpectError(ReadCsv(trailing, 2), trailing, 1, "bad number '2x' in column 2");
  const std::string overflow = WriteTemp("1,1e999,3\n");
  ExpectError(ReadCsv(overflow, 2), overflow, 1, "bad number '1e999'");
}

TEST(ReadCsvTest, RejectsNanAndInfinity) {
  const std::string nan = WriteTemp("1,nan,3\n");
  ExpectError(ReadCsv(nan, 0), nan, 1, "non-finite number 'nan' in column 2");
  const std::string inf = WriteTemp("1,2\n-inf,3\n");
  ExpectError(ReadCsv(inf, 0), inf, 2, "non-finite number '-inf' in column 1");
}

TEST(ReadCsvTest, EmptyFileNeedsAGivenDimension) {
  const std::string path = WriteTemp("# nothing\n\n");
  absl::StatusOr<Dataset> data = ReadCsv(path, 0);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(path + ": no data rows"));

  data = ReadCsv(path, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 4u);
  EXPECT_EQ(data->size(), 0u);
}

TEST(ReadCsvTest, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/no_such_file.csv";
  absl::StatusOr<Dataset> data = ReadCsv(path, 0);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr(path));
}

// --- LIBSVM ----------------------------------------------------------------------

TEST(ReadLibsvmTest, DensifiesWithOneBasedIndicesAndInfersTheDimension) {
  const std::string path = WriteTemp("+1 1:0.5 3:2\n# comment\n\n-1 4:-1\t2:7\n0.25\n");
  absl::StatusOr<Dataset> data = ReadLibsvm(path, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 4u);
  ASSERT_EQ(data->size(), 3u);
  EXPECT_THAT(data->row(0), ElementsAre(0.5, 0, 2, 0));
  EXPECT_THAT(data->row(1), ElementsAre(0, 7, 0, -1));  // indices need not increase
  EXPECT_THAT(data->row(2), ElementsAre(0, 0, 0, 0));   // a label alone: all zeros
  EXPECT_THAT(data->y, ElementsAre(1, -1, 0.25));
}

TEST(ReadLibsvmTest, AGivenDimensionAboveTheLargestIndexPadsWithZeros) {
  const std::string path = WriteTemp("1 2:3\n");
  absl::StatusOr<Dataset> data = ReadLibsvm(path, 5);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 5u);
  EXPECT_THAT(data->row(0), ElementsAre(0, 3, 0, 0, 0));
}

TEST(ReadLibsvmTest, RejectsIndexZero) {
  const std::string path = WriteTemp("1 1:1\n1 0:1\n");
  ExpectError(ReadLibsvm(path, 0), path, 2, "index 0: indices are 1-based");
}

TEST(ReadLibsvmTest, RejectsAnIndexAboveTheDimension) {
  const std::string path = WriteTemp("1 1:1\n-1 2:1 4:1\n");
  ExpectError(ReadLibsvm(path, 3), path, 2, "index 4 exceeds the dimension 3");
}

TEST(ReadLibsvmTest, RejectsDuplicateIndicesButNotTheSameIndexOnAnotherRow) {
  const std::string path = WriteTemp("1 2:1\n1 2:1\n1 2:1 1:1 2:3\n");
  ExpectError(ReadLibsvm(path, 0), path, 3, "duplicate index 2");
  ExpectError(ReadLibsvm(path, 2), path, 3, "duplicate index 2");
}

TEST(ReadLibsvmTest, RejectsMalformedTokens) {
  const std::string no_colon = WriteTemp("1 3\n");
  ExpectError(ReadLibsvm(no_colon, 0), no_colon, 1, "expected index:value, got '3'");
  const std::string bad_index = WriteTemp("1 x:3\n");
  ExpectError(ReadLibsvm(bad_index, 0), bad_index, 1, "bad index 'x'");
  const std::string negative_index = WriteTemp("1 -2:3\n");
  ExpectError(ReadLibsvm(negative_index, 0), negative_index, 1, "bad index '-2'");
  const std::string bad_value = WriteTemp("1 2:y\n");
  ExpectError(ReadLibsvm(bad_value, 0), bad_value, 1, "bad number 'y' at index 2");
  const std::string bad_label = WriteTemp("1 1:1\nyes 2:3\n");
  ExpectError(ReadLibsvm(bad_label, 0), bad_label, 2, "bad number 'yes' as the label");
}

TEST(ReadLibsvmTest, RejectsNanAndInfinity) {
  const std::string value = WriteTemp("1 1:nan\n");
  ExpectError(ReadLibsvm(value, 0), value, 1, "non-finite number 'nan' at index 1");
  const std::string label = WriteTemp("inf 1:1\n");
  ExpectError(ReadLibsvm(label, 0), label, 1, "non-finite number 'inf' as the label");
}

TEST(ReadLibsvmTest, CannotInferADimensionWithoutNonzeros) {
  const std::string path = WriteTemp("1\n-1\n");
  absl::StatusOr<Dataset> data = ReadLibsvm(path, 0);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr(path + ": no nonzero input"));
}

TEST(ReadLibsvmTest, MissingFileIsNotFound) {
  absl::StatusOr<Dataset> data = ReadLibsvm(::testing::TempDir() + "/missing.svm", 3);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
}

// --- Series ----------------------------------------------------------------------

TEST(ReadSeriesTest, EmbedsWithLagsAndZerosBeforeTheStart) {
  const std::string path = WriteTemp("# s\n1\n2\n\n3\n4\n5\n");
  absl::StatusOr<Dataset> data = ReadSeries(path, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 3u);
  ASSERT_EQ(data->size(), 4u);  // N values give N-1 rows
  EXPECT_THAT(data->row(0), ElementsAre(1, 0, 0));
  EXPECT_THAT(data->row(1), ElementsAre(2, 1, 0));
  EXPECT_THAT(data->row(2), ElementsAre(3, 2, 1));
  EXPECT_THAT(data->row(3), ElementsAre(4, 3, 2));
  EXPECT_THAT(data->y, ElementsAre(2, 3, 4, 5));
}

TEST(ReadSeriesTest, FewerThanTwoValuesGiveNoRows) {
  const std::string path = WriteTemp("0.5\n");
  absl::StatusOr<Dataset> data = ReadSeries(path, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dim, 2u);
  EXPECT_EQ(data->size(), 0u);
}

TEST(ReadSeriesTest, RejectsEmbeddingZero) {
  const std::string path = WriteTemp("1\n2\n");
  absl::StatusOr<Dataset> data = ReadSeries(path, 0);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("embedding must be at least 1"));
}

TEST(ReadSeriesTest, RejectsSeveralValuesOnALine) {
  const std::string path = WriteTemp("1\n2 3\n");
  ExpectError(ReadSeries(path, 1), path, 2, "expected one value per line, got '2 3'");
  const std::string commas = WriteTemp("1,2\n");
  ExpectError(ReadSeries(commas, 1), commas, 1, "expected one value per line");
}

TEST(ReadSeriesTest, RejectsBadAndNonFiniteNumbers) {
  const std::string bad = WriteTemp("1\n\nfoo\n");
  ExpectError(ReadSeries(bad, 1), bad, 3, "bad number 'foo'");
  const std::string nan = WriteTemp("NaN\n");
  ExpectError(ReadSeries(nan, 1), nan, 1, "non-finite number 'NaN'");
}

TEST(ReadSeriesTest, MissingFileIsNotFound) {
  absl::StatusOr<Dataset> data = ReadSeries(::testing::TempDir() + "/missing.dat", 2);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
}

TEST(DataReaderTest, QuotesOnlyTheStartOfALongBadToken) {
  const std::string path = WriteTemp(std::string(100, 'z') + ",1\n");
  absl::StatusOr<Dataset> data = ReadCsv(path, 0);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("'" + std::string(40, 'z') + "...'"));
  EXPECT_LT(data.status().message().size(), path.size() + 100);
}

}  // namespace
}  // namespace okl
