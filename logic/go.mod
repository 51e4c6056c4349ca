module github.com/sparkim/spark/logic

go 1.26.0
