module github.com/sparkim/spark/migrations

go 1.26.0
