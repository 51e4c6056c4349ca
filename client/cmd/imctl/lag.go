package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// The deliver gauges queue-lag reads. Every deliver instance samples every
// partition from Redis (not only those it owns), so any one instance's
// /metrics has the whole queue; with several, the highest value per
// partition wins, as the dashboards take max by (partition).
const (
	metricLength = "spark_deliver_queue_length"
	metricPend   = "spark_deliver_queue_pending"
	metricAge    = "spark_deliver_queue_oldest_age_seconds"
)

// Partition is one row of "queue-lag".
type Partition struct {
	Partition        int     `json:"partition"`
	Length           int64   `json:"length"`
	Pending          int64   `json:"pending"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// Source is one deliver admin address queue-lag read.
type Source struct {
	Addr  string `json:"addr"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// QueueLag is the answer of "queue-lag".
type QueueLag struct {
	Partitions []Partition `json:"partitions"`
	Sources    []Source    `json:"sources"`
}

func (c *ctl) queueLag(ctx context.Context, args []string) error {
	fs := subFlags("queue-lag")
	addrs := fs.String("deliver-admin", c.cfg.Deliver.AdminAddr, "deliver admin addresses, comma-separated")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("queue-lag [-deliver-admin a,b]")
	}
	parts := map[int]*Partition{}
	lag := QueueLag{Partitions: []Partition{}, Sources: []Source{}}
	read := 0
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		src := Source{Addr: a}
		src.Ready = httpGet(ctx, a, "/readyz", io.Discard) == nil
		var body strings.Builder
		if err := httpGet(ctx, a, "/metrics", &body); err != nil {
			src.Error = err.Error()
		} else {
			read++
			mergeQueueMetrics(parts, body.String())
		}
		lag.Sources = append(lag.Sources, src)
	}
	for _, p := range parts {
		lag.Partitions = append(lag.Partitions, *p)
	}
	sort.Slice(lag.Partitions, func(i, j int) bool { return lag.Partitions[i].Partition < lag.Partitions[j].Partition })
	rows := make([][]string, 0, len(lag.Partitions))
	for _, p := range lag.Partitions {
		rows = append(rows, []string{strconv.Itoa(p.Partition), strconv.FormatInt(p.Length, 10), strconv.FormatInt(p.Pending, 10),
			strconv.FormatFloat(p.OldestAgeSeconds, 'f', 3, 64)})
	}
	if err := c.emit(lag, []string{"PARTITION", "LENGTH", "PENDING", "OLDEST_AGE_S"}, rows); err != nil {
		return err
	}
	if read == 0 {
		return fmt.Errorf("no deliver admin address answered /metrics (%s)", *addrs)
	}
	return nil
}

func httpGet(ctx context.Context, addr, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s%s: %s", addr, path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// mergeQueueMetrics folds the queue gauges of one Prometheus text
// exposition into parts, keeping the highest value per partition.
func mergeQueueMetrics(parts map[int]*Partition, text string) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, part, val, ok := parseSample(sc.Text())
		if !ok {
			continue
		}
		p := parts[part]
		if p == nil {
			p = &Partition{Partition: part}
			parts[part] = p
		}
		switch name {
		case metricLength:
			p.Length = max(p.Length, int64(val))
		case metricPend:
			p.Pending = max(p.Pending, int64(val))
		case metricAge:
			p.OldestAgeSeconds = max(p.OldestAgeSeconds, val)
		}
	}
}

// parseSample reads a line `name{partition="N"} value` of one of the
// queue gauges.
func parseSample(line string) (name string, partition int, val float64, ok bool) {
	brace := strings.IndexByte(line, '{')
	if brace < 0 {
		return "", 0, 0, false
	}
	name = line[:brace]
	if name != metricLength && name != metricPend && name != metricAge {
		return "", 0, 0, false
	}
	end := strings.IndexByte(line, '}')
	if end < brace {
		return "", 0, 0, false
	}
	found := false
	for _, l := range strings.Split(line[brace+1:end], ",") {
		k, v, _ := strings.Cut(l, "=")
		if strings.TrimSpace(k) == "partition" {
			n, err := strconv.Atoi(strings.Trim(v, `"`))
			if err != nil {
				return "", 0, 0, false
			}
			partition, found = n, true
		}
	}
	fields := strings.Fields(line[end+1:])
	if !found || len(fields) == 0 {
		return "", 0, 0, false
	}
	val, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, 0, false
	}
	return name, partition, val, true
}
