package buildversion

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "5b0ba42e0c1d2e3f4a5b6c7d8e9f00112233aabb"}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"tagged module", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{rev}}, "v1.4.0"},
		{"vcs revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{rev}}, "5b0ba42e0c1d"},
		{"dirty tree", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{rev, {Key: "vcs.modified", Value: "true"}}}, "5b0ba42e0c1d-dirty"},
		{"no vcs", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(&tc.bi); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
