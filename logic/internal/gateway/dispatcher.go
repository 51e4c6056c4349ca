package gateway

import "sync"

// Dispatcher runs tasks strictly in submission order per key and tasks of
// different keys in parallel. A key has a goroutine only while it has work:
// the first Submit starts one, which drains the key's queue and exits when
// it is empty.
type Dispatcher[K comparable] struct {
	mu     sync.Mutex
	queues map[K]*taskQueue
}

type taskQueue struct {
	tasks []func()
}

// NewDispatcher returns an empty Dispatcher.
func NewDispatcher[K comparable]() *Dispatcher[K] {
	return &Dispatcher[K]{queues: map[K]*taskQueue{}}
}

// Submit queues task behind every earlier task of key.
func (d *Dispatcher[K]) Submit(key K, task func()) {
	d.mu.Lock()
	if q, ok := d.queues[key]; ok {
		q.tasks = append(q.tasks, task)
		d.mu.Unlock()
		return
	}
	q := &taskQueue{}
	d.queues[key] = q
	d.mu.Unlock()
	go d.run(key, q, task)
}

func (d *Dispatcher[K]) run(key K, q *taskQueue, task func()) {
	for {
		runTask(task)
		d.mu.Lock()
		if len(q.tasks) == 0 {
			delete(d.queues, key)
			d.mu.Unlock()
			return
		}
		task = q.tasks[0]
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		d.mu.Unlock()
	}
}

// runTask runs one task; a panic is contained so the key's later tasks
// still run (tasks recover and answer themselves; this is the last guard).
func runTask(task func()) {
	defer func() { _ = recover() }()
	task()
}

// Active returns the number of keys with queued or running work.
func (d *Dispatcher[K]) Active() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queues)
}

// tracker counts in-flight work of one stream.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
}

// wait returns a channel closed when nothing is in flight.
func (t *tracker) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return t.idle
}
