package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Binaries names the built executables.
type Binaries struct {
	Dir                                         string
	Gate, Logic, Migrate, Deliver, IMCli, IMCtl string
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// Build returns the binaries, built once per test process with the
// failpoints tag into a temporary directory, or taken from SPARK_BIN_DIR
// when set (make e2e builds them there first).
func Build() (Binaries, error) {
	buildOnce.Do(func() {
		dir := os.Getenv("SPARK_BIN_DIR")
		if dir == "" {
			dir, buildErr = os.MkdirTemp("", "spark-e2e-bin-")
			if buildErr != nil {
				return
			}
			root, err := repoRoot()
			if err != nil {
				buildErr = err
				return
			}
			cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", dir+"/",
				"./gate/cmd/gate", "./logic/cmd/logic", "./logic/cmd/migrate", "./deliver/cmd/deliver", "./client/cmd/imcli", "./client/cmd/imctl")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build binaries: %v\n%s", err, out)
				return
			}
		}
		built = Binaries{Dir: dir,
			Gate: filepath.Join(dir, "gate"), Logic: filepath.Join(dir, "logic"),
			Migrate: filepath.Join(dir, "migrate"), Deliver: filepath.Join(dir, "deliver"),
			IMCli: filepath.Join(dir, "imcli"), IMCtl: filepath.Join(dir, "imctl")}
		for _, b := range []string{built.Gate, built.Logic, built.Migrate, built.Deliver} {
			if _, err := os.Stat(b); err != nil {
				buildErr = fmt.Errorf("missing binary: %w", err)
				return
			}
		}
	})
	return built, buildErr
}

// repoRoot finds the directory holding go.work, from this source file.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the framework source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.work not found above %s", file)
		}
		dir = parent
	}
}
