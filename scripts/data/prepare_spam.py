#!/usr/bin/env python3
"""Makes data/spam_train.csv and data/spam_test.csv from UCI Spambase as Debian ships it.

Input: a CSV of R's kernlab::spam data frame, as R writes it with
  Rscript -e 'data(spam, package = "kernlab"); write.csv(spam, "spam.csv", row.names = FALSE)'
(r-cran-kernlab 0.9-32-1: /usr/lib/R/site-library/kernlab/data/spam.rda): a header, 57
numeric features, then `type` (spam or nonspam).

Output: rows "x_1,...,x_57,y" (okl's CSV format): each feature log1p-transformed (the
counts and run lengths span 0 to 15,841; word frequencies 0 to 100), y = +1 for spam and
-1 for nonspam; the rows shuffled with a fixed seed (the source lists every spam row
first), the first 3,601 the training stream and the last 1,000 the test set.

  python3 scripts/data/prepare_spam.py spam.csv data/
"""
import csv
import math
import random
import sys


def main(source: str, out_dir: str) -> None:
    with open(source, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if len(header) != 58 or header[-1] != "type" or len(body) != 4601:
        sys.exit(f"{source}: expected 4,601 rows of 57 features and type")
    examples = []
    for row in body:
        features = [math.log1p(float(v)) for v in row[:57]]
        label = {"spam": 1, "nonspam": -1}[row[57]]
        examples.append(",".join([f"{v:.6g}" for v in features] + [str(label)]))
    random.Random(20261128).shuffle(examples)
    for name, part in (("spam_train.csv", examples[:3601]), ("spam_test.csv", examples[3601:])):
        with open(f"{out_dir}/{name}", "w") as f:
            f.write("\n".join(part) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
