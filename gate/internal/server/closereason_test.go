package server

import (
	"regexp"
	"testing"
)

// Every close reason has its own text and label, and labels are valid
// Prometheus label values a dashboard can match on.
func TestCloseReasonsAreNamedOnce(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z_]*$`)
	texts, labels := map[string]closeReason{}, map[string]closeReason{}
	for r := range closeReason(numCloseReasons) {
		text, label := r.String(), r.label()
		switch {
		case text == "" || label == "":
			t.Fatalf("reason %d has no text or label", r)
		case !snake.MatchString(label):
			t.Fatalf("reason %q: label %q is not snake_case", text, label)
		}
		if prev, ok := texts[text]; ok {
			t.Fatalf("reasons %d and %d share the text %q", prev, r, text)
		}
		if prev, ok := labels[label]; ok {
			t.Fatalf("reasons %d and %d share the label %q", prev, r, label)
		}
		texts[text], labels[label] = r, r
	}
	if got := numCloseReasons.String(); got != "unknown" {
		t.Fatalf("out-of-range reason reads %q", got)
	}
}
