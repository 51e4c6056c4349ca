module github.com/sparkim/spark/bench

go 1.26.0

replace (
	github.com/sparkim/spark/client => ../client
	github.com/sparkim/spark/migrations => ../migrations
	github.com/sparkim/spark/pkg => ../pkg
	github.com/sparkim/spark/proto => ../proto
)

require (
	github.com/sparkim/spark/pkg v0.0.0
	golang.org/x/sys v0.48.0
)
