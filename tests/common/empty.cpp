// Keeps dtrain_test_common non-empty.
