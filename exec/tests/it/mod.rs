mod check;
mod common;
mod cpu;
mod cuda;
mod fake;
mod headinfer;
