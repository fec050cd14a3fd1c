module ferrox

go 1.19
