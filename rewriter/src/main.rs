fn main() { println!("{}", stint::rtimage::IMAGE.len()); }
