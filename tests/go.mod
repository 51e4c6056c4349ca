module github.com/sparkim/spark/tests

go 1.26.0
