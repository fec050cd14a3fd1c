module github.com/ferrox-ai/ferrox/bindings/go

go 1.19
