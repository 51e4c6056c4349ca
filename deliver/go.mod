module github.com/sparkim/spark/deliver

go 1.26.0
