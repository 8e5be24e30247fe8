"""Run reports: the HTML results page of test and predict, the training curves PNG."""
