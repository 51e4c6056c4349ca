package scenario

import "os"

func selfPID() int { return os.Getpid() }
