package metrics

// Classify is classify, for the tests of package metrics_test, which build
// Events as ginlimit does.
var Classify = classify
