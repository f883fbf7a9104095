#!/usr/bin/env Rscript
# Makes data/letter.csv and data/satimage.csv from two UCI multi-class sets as Debian ships them.
#
# Input: Debian 12's r-cran-mlbench 2.1-3-1 (/usr/lib/R/site-library/mlbench/data/):
#   LetterRecognition.rda: 20,000 rows, the class `lettr` (A-Z) first, then 16 integer
#     features, in UCI's order (letter-recognition.data);
#   Satellite.rda: 6,435 rows, 36 integer features (x.1 ... x.36), then the class `classes`,
#     sat.trn's 4,435 rows followed by sat.tst's 2,000 (the class counts of each part match).
#
# Output: rows "x_1,...,x_d,y" (okl's CSV format, no header), the features as integers and y
# the class name: letters A-Z; for satimage mlbench's names with spaces as underscores
# (red_soil, cotton_crop, grey_soil, damp_grey_soil, vegetation_stubble,
# very_damp_grey_soil; UCI classes 1, 2, 3, 4, 5, 7). Rows stay in the source order: letter's
# first 16,000 rows are the usual training stream and the last 4,000 the test set; satimage's
# first 4,435 are sat.trn and the last 2,000 sat.tst.
#
#   Rscript scripts/data/prepare_multiclass.R data/

write_csv <- function(features, labels, path) {
  stopifnot(!anyNA(features), !anyNA(labels), all(features == round(features)))
  cols <- lapply(features, function(v) as.character(as.integer(v)))
  lines <- do.call(paste, c(cols, list(as.character(labels), sep = ",")))
  con <- file(path, open = "wb")
  writeLines(lines, con, sep = "\n")
  close(con)
}

main <- function(out_dir) {
  data(LetterRecognition, package = "mlbench", envir = environment())
  data(Satellite, package = "mlbench", envir = environment())

  letter <- LetterRecognition
  if (nrow(letter) != 20000 || ncol(letter) != 17 || names(letter)[1] != "lettr")
    stop("LetterRecognition: expected 20,000 rows of lettr and 16 features")
  write_csv(letter[, 2:17], letter$lettr, file.path(out_dir, "letter.csv"))

  sat <- Satellite
  if (nrow(sat) != 6435 || ncol(sat) != 37 || names(sat)[37] != "classes")
    stop("Satellite: expected 6,435 rows of 36 features and classes")
  write_csv(sat[, 1:36], gsub(" ", "_", as.character(sat$classes)),
            file.path(out_dir, "satimage.csv"))
}

args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 1) stop("usage: Rscript scripts/data/prepare_multiclass.R OUT_DIR")
main(args[1])
