INSERT INTO tune SELECT * FROM tune a, tune b;
