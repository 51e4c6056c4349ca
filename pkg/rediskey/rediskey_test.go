package rediskey

import (
	"math"
	"testing"

	"github.com/sparkim/spark/pkg/msgid"
)

// TestPartitionSpreadsOneMachinesConversationsOverEveryPartition checks
// the reason Partition mixes the id: conversation ids issued by one logic
// share their low bits (the machine id), and each partition must still
// get its share of them, for every machine id and partition count.
func TestPartitionSpreadsOneMachinesConversationsOverEveryPartition(t *testing.T) {
	const ids = 16000
	for _, tc := range []struct {
		machine    int64
		partitions int
	}{
		{1, 16}, {2, 16}, {0, 8}, {msgid.MaxMachineID, 16}, {7, 3}, {5, 64},
	} {
		counts := make([]int, tc.partitions)
		for i := int64(0); i < ids; i++ {
			// One conversation per millisecond tick, sequence 0: the shape
			// of ids issued to a lightly loaded logic.
			id := (1_000_000+i)<<(msgid.BitsSequence+msgid.BitsMachineID) | tc.machine
			p := Partition(id, tc.partitions)
			if p < 0 || p >= tc.partitions {
				t.Fatalf("Partition(%d, %d) = %d, out of range", id, tc.partitions, p)
			}
			counts[p]++
		}
		want := float64(ids) / float64(tc.partitions)
		for p, n := range counts {
			if math.Abs(float64(n)-want) > want/4 {
				t.Errorf("machine %d, %d partitions: partition %d got %d ids, want %.0f ± 25%% (all: %v)",
					tc.machine, tc.partitions, p, n, want, counts)
				break
			}
		}
	}
}

// TestPartitionIsStableAndInRange checks the properties every caller
// relies on: the same id always maps to the same partition (logic's
// XADD and any later job of the conversation agree), every result is in
// [0, partitions), and one partition or fewer maps everything to 0.
func TestPartitionIsStableAndInRange(t *testing.T) {
	for _, tc := range []struct {
		id         int64
		partitions int
	}{
		{0, 16}, {1, 16}, {-1, 16}, {math.MinInt64, 16}, {math.MaxInt64, 16}, {123456789, 7}, {42, 1}, {42, 0},
	} {
		p := Partition(tc.id, tc.partitions)
		if tc.partitions <= 1 {
			if p != 0 {
				t.Errorf("Partition(%d, %d) = %d, want 0", tc.id, tc.partitions, p)
			}
			continue
		}
		if p < 0 || p >= tc.partitions {
			t.Errorf("Partition(%d, %d) = %d, out of range", tc.id, tc.partitions, p)
		}
		if again := Partition(tc.id, tc.partitions); again != p {
			t.Errorf("Partition(%d, %d) = %d then %d", tc.id, tc.partitions, p, again)
		}
	}
}
