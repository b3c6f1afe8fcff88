package conformance

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// result is the outcome of one conformance test.
type result struct {
	name    string
	outcome string // passed, failed or skipped
	reason  string // why it was skipped
}

// summary collects the outcome of every test of a run, from the suite's Hook, which the
// suite calls once per test, one test at a time.
type summary []result

// record notes the outcome of test, which t ran.
func (s *summary) record(t *testing.T, test suite.ConformanceTest, cs *suite.ConformanceTestSuite) {
	r := result{name: test.ShortName, outcome: "passed"}
	switch {
	case t.Failed():
		r.outcome = "failed"
	case t.Skipped():
		r.outcome = "skipped"
		r.reason = skipReason(test, cs)
	}
	*s = append(*s, r)
}

// skipReason says why the suite skipped test.
func skipReason(test suite.ConformanceTest, cs *suite.ConformanceTestSuite) string {
	var missing []string
	for _, f := range test.Features {
		if !cs.SupportedFeatures.Has(f) {
			missing = append(missing, string(f))
		}
	}
	switch {
	case len(missing) > 0:
		return "needs a feature Switchboard does not declare: " + strings.Join(missing, ", ")
	case cs.SkipTests.Has(test.ShortName):
		return "skipped with -skip-tests"
	case cs.RunTest != "" && cs.RunTest != test.ShortName:
		return "not selected by -run-test"
	case test.Provisional:
		return "provisional"
	}
	return "skipped by the test itself (see the run's log)"
}

// write writes the summary as Markdown to path.
func (s summary) write(path string, opts suite.ConformanceOptions, took time.Duration) error {
	count := map[string]int{}
	for _, r := range s {
		count[r.outcome]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Gateway API conformance\n\n")
	fmt.Fprintf(&b, "Written by `make conformance` (test/conformance): the upstream suite "+
		"sigs.k8s.io/gateway-api/conformance, profiles %v, against the manager and gateway on the "+
		"local control plane. The suite's own report is [report.yaml](report.yaml).\n\n", opts.ConformanceProfiles)
	fmt.Fprintf(&b, "**%d passed, %d failed, %d skipped** in %v.\n\n", count["passed"], count["failed"], count["skipped"], took.Round(time.Second))
	declared := slices.Sorted(slices.Values(featureNames(opts.SupportedFeatures)))
	fmt.Fprintf(&b, "Declared features: %s.\n\n", strings.Join(declared, ", "))
	b.WriteString("| test | result | why skipped |\n|---|---|---|\n")
	for _, r := range s {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, r.outcome, r.reason)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// featureNames returns the names of fs.
func featureNames(fs []features.FeatureName) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}
