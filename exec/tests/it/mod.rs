mod check;
mod common;
mod cpu;
mod cuda;
mod headinfer;
