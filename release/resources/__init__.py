"""Knowledge as data: files shipped with wheelwright, each read once by a small typed reader."""
