package main

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"
)

func TestMergeQueueMetrics(t *testing.T) {
	tests := []struct {
		name  string
		g     queueGauges
		texts []string
		want  map[int]Partition
	}{
		{"one instance", deliverGauges, []string{`# HELP spark_deliver_queue_length x
# TYPE spark_deliver_queue_length gauge
spark_deliver_queue_length{partition="0"} 3
spark_deliver_queue_length{partition="1"} 0
spark_deliver_queue_pending{partition="0"} 2
spark_deliver_queue_oldest_age_seconds{partition="0"} 1.5
spark_deliver_queue_lag_seconds_bucket{le="0.1"} 9
spark_deliver_owned_partitions 2
`}, map[int]Partition{0: {Partition: 0, Length: 3, Pending: 2, OldestAgeSeconds: 1.5}, 1: {Partition: 1}}},
		{"highest per partition wins", deliverGauges, []string{
			`spark_deliver_queue_length{partition="0"} 3` + "\n" + `spark_deliver_queue_oldest_age_seconds{partition="0"} 4`,
			`spark_deliver_queue_length{partition="0"} 5` + "\n" + `spark_deliver_queue_oldest_age_seconds{partition="0"} 2`,
		}, map[int]Partition{0: {Partition: 0, Length: 5, OldestAgeSeconds: 4}}},
		{"push gauges, not deliver's", pushGauges, []string{`spark_logic_push_queue_length{partition="1"} 4
spark_logic_push_queue_pending{partition="1"} 1
spark_logic_push_queue_oldest_age_seconds{partition="1"} 0.25
spark_deliver_queue_length{partition="1"} 99
spark_logic_push_lag_seconds_bucket{le="0.1"} 9
`}, map[int]Partition{1: {Partition: 1, Length: 4, Pending: 1, OldestAgeSeconds: 0.25}}},
		{"other labels and junk", deliverGauges, []string{`spark_deliver_queue_length{instance="d1",partition="7"} 12 1700000000000
spark_deliver_queue_length{partition="x"} 1
spark_deliver_queue_length{partition="2"} nope
spark_deliver_queue_length 4
`}, map[int]Partition{7: {Partition: 7, Length: 12}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := map[int]*Partition{}
			for _, s := range tt.texts {
				mergeQueueMetrics(parts, s, tt.g)
			}
			got := map[int]Partition{}
			for k, v := range parts {
				got[k] = *v
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args    []string
		wantPos []string
		wantTTL time.Duration
		wantErr bool
	}{
		{[]string{"7"}, []string{"7"}, time.Hour, false},
		{[]string{"7", "-ttl", "2m"}, []string{"7"}, 2 * time.Minute, false},
		{[]string{"-ttl=3s", "7", "phone"}, []string{"7", "phone"}, 3 * time.Second, false},
		{[]string{"7", "-nope"}, nil, 0, true},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ttl := fs.Duration("ttl", time.Hour, "")
		pos, err := parseInterspersed(fs, tt.args)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%v: err %v", tt.args, err)
		}
		if err == nil && (!reflect.DeepEqual(pos, tt.wantPos) || *ttl != tt.wantTTL) {
			t.Fatalf("%v: got %v %v, want %v %v", tt.args, pos, *ttl, tt.wantPos, tt.wantTTL)
		}
	}
}
