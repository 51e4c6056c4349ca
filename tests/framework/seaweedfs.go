package framework

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// WeedEnv names SeaweedFS's weed binary. make e2e sets it from
// deploy/seaweedfs/build-weed.sh; unset, StartSeaweedFS runs that script,
// which builds the binary once (several minutes) and prints its path.
const WeedEnv = "SPARK_WEED_BIN"

// S3Server is a private SeaweedFS S3 gateway on loopback: a real S3
// server that checks SigV4 signatures and presigned expiry.
type S3Server struct {
	Endpoint  string // host:port, no scheme
	AccessKey string
	SecretKey string
	Region    string
	proc      *Process
}

// LogicEnv is the logic environment that keeps media in bucket on this
// server (the bucket is created by the test, e.g. with CreateBucket).
func (s *S3Server) LogicEnv(bucket string) []string {
	return []string{
		"IM_LOGIC_MEDIA_STORE=s3", "IM_LOGIC_MEDIA_S3_ENDPOINT=" + s.Endpoint, "IM_LOGIC_MEDIA_S3_BUCKET=" + bucket,
		"IM_LOGIC_MEDIA_S3_ACCESS_KEY=" + s.AccessKey, "IM_LOGIC_MEDIA_S3_SECRET_KEY=" + s.SecretKey,
		"IM_LOGIC_MEDIA_S3_REGION=" + s.Region,
	}
}

// weedBinary returns the weed binary: WeedEnv, or the build script's.
func weedBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(WeedEnv); bin != "" {
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			t.Fatalf("%s=%s: not a weed binary: %v", WeedEnv, bin, err)
		}
		return bin
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "deploy/seaweedfs/build-weed.sh")).Output()
	if err != nil {
		t.Fatalf("deploy/seaweedfs/build-weed.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// StartSeaweedFS starts `weed server -s3` (master, volume, filer and S3
// gateway in one process, every port free on 127.0.0.1) with one
// identity, waits until the gateway answers a signed request, and stops
// it when the test ends.
func StartSeaweedFS(t testing.TB) *S3Server {
	t.Helper()
	bin := weedBinary(t)
	dir := t.TempDir()
	s := &S3Server{AccessKey: "sparktest", SecretKey: "sparktest-secret-key-0123456789", Region: "us-east-1"}
	ident := fmt.Sprintf(`{"identities":[{"name":"spark","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		s.AccessKey, s.SecretKey)
	cfg := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfg, []byte(ident), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o750); err != nil {
		t.Fatal(err)
	}
	port := func() string { return strconv.Itoa(FreePort(t)) }
	s3Port := port()
	s.Endpoint = "127.0.0.1:" + s3Port
	args := []string{"server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + data,
		"-master.port=" + port(), "-master.port.grpc=" + port(), "-master.volumeSizeLimitMB=64",
		"-volume.port=" + port(), "-volume.port.grpc=" + port(), "-volume.max=8",
		"-filer", "-filer.port=" + port(), "-filer.port.grpc=" + port(),
		"-s3", "-s3.port=" + s3Port, "-s3.port.grpc=" + port(), "-s3.config=" + cfg, "-metricsPort=" + port(),
	}
	s.proc = NewProcess(t, "seaweedfs", bin, args, nil)
	if _, err := s.proc.Launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.proc.Stop() })
	// Up once an anonymous request is refused by the gateway itself
	// (403 AccessDenied, an S3 XML error), not by a closed port.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Endpoint+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("seaweedfs S3 gateway on %s not up within 60 s:\n%s", s.Endpoint, s.proc.Tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateBucket makes a bucket on the server.
func (s *S3Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: s.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The gateway answers before its filer has joined: retry a moment.
	for {
		err = c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region})
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("create bucket %s on seaweedfs: %v\n%s", name, err, s.proc.Tail(30))
		case <-time.After(300 * time.Millisecond):
		}
	}
}
