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

// queueGauges names the three gauges of a stream queue. Every deliver
// instance samples every deliver partition, and every logic with push on
// every push partition, from Redis (not only what it works on), so any
// one instance's /metrics has the whole queue; with several, the highest
// value per partition wins, as the dashboards take max by (partition).
type queueGauges struct{ length, pending, age string }

var (
	deliverGauges = queueGauges{"spark_deliver_queue_length", "spark_deliver_queue_pending", "spark_deliver_queue_oldest_age_seconds"}
	pushGauges    = queueGauges{"spark_logic_push_queue_length", "spark_logic_push_queue_pending", "spark_logic_push_queue_oldest_age_seconds"}
)

// Partition is one row of "queue-lag".
type Partition struct {
	Partition        int     `json:"partition"`
	Length           int64   `json:"length"`
	Pending          int64   `json:"pending"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// Source is one admin address queue-lag or push-queue read.
type Source struct {
	Addr  string `json:"addr"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// QueueLag is the answer of "queue-lag" and "push-queue".
type QueueLag struct {
	Partitions []Partition `json:"partitions"`
	Sources    []Source    `json:"sources"`
}

func (c *ctl) queueLag(ctx context.Context, args []string) error {
	return c.streamQueue(ctx, args, "queue-lag", "deliver-admin", "deliver", c.cfg.Deliver.AdminAddr, deliverGauges)
}

// pushQueue is "push-queue": the offline-push streams, read from logic's
// gauges (sampled by every logic whose push is on).
func (c *ctl) pushQueue(ctx context.Context, args []string) error {
	return c.streamQueue(ctx, args, "push-queue", "logic-admin", "logic", c.cfg.Logic.AdminAddr, pushGauges)
}

// streamQueue reads one stream queue's gauges from the processes' admin
// ports named by -<flag>.
func (c *ctl) streamQueue(ctx context.Context, args []string, cmd, flagName, process, def string, g queueGauges) error {
	fs := subFlags(cmd)
	addrs := fs.String(flagName, def, process+" admin addresses, comma-separated")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError(fmt.Sprintf("%s [-%s a,b]", cmd, flagName))
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
			mergeQueueMetrics(parts, body.String(), g)
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
		return fmt.Errorf("no %s admin address answered /metrics (%s)", process, *addrs)
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
func mergeQueueMetrics(parts map[int]*Partition, text string, g queueGauges) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, part, val, ok := parseSample(sc.Text(), g)
		if !ok {
			continue
		}
		p := parts[part]
		if p == nil {
			p = &Partition{Partition: part}
			parts[part] = p
		}
		switch name {
		case g.length:
			p.Length = max(p.Length, int64(val))
		case g.pending:
			p.Pending = max(p.Pending, int64(val))
		case g.age:
			p.OldestAgeSeconds = max(p.OldestAgeSeconds, val)
		}
	}
}

// parseSample reads a line `name{partition="N"} value` of one of the
// queue gauges.
func parseSample(line string, g queueGauges) (name string, partition int, val float64, ok bool) {
	brace := strings.IndexByte(line, '{')
	if brace < 0 {
		return "", 0, 0, false
	}
	name = line[:brace]
	if name != g.length && name != g.pending && name != g.age {
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
