"""What both sides of the boundary agree on: the names of checked calls (labels) and the
raw output files a candidate's child writes and the judge reads. Plain data, no code."""
