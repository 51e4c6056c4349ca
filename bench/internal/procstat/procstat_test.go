package procstat

import (
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
