module github.com/sparkim/spark/gate

go 1.26.0
