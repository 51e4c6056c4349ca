package fanout

import (
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/dialog"
)

// BenchmarkPreview is deliver's cost of a job's list preview: parsed from
// the push data (jobs without logic's preview) or carried in the job.
func BenchmarkPreview(b *testing.B) {
	f := &Fanout{log: zap.NewNop()}
	text := `{"text":"` + strings.Repeat("a fairly ordinary chat line ", 8) + `"}`
	parsed := messageJob(77, 5, text)
	carried := messageJob(77, 5, text)
	carried.Preview, _ = dialog.EncodePreview(dialog.PreviewOf(77, 1, 1, []byte(text)))
	b.Run("parsed", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := f.preview(0, parsed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("carried", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := f.preview(0, carried); err != nil {
				b.Fatal(err)
			}
		}
	})
}
