module github.com/sparkim/spark/client

go 1.26.0
