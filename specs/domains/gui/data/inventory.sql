-- The inventory app's database: schema and seed rows (written into each environment by gui.seed_db).
CREATE TABLE locations (code TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE items (
    sku TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    category TEXT NOT NULL,
    location TEXT NOT NULL REFERENCES locations(code),
    quantity INTEGER NOT NULL CHECK (quantity >= 0),
    price_cents INTEGER NOT NULL CHECK (price_cents > 0)
);
-- Every change, by whichever way it came: 'web' (the GUI) or 'api' (the MCP tools).
CREATE TABLE changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sku TEXT NOT NULL,
    field TEXT NOT NULL,
    old TEXT,
    new TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    via TEXT NOT NULL CHECK (via IN ('web', 'api'))
);
INSERT INTO locations VALUES
    ('A1', 'Aisle A, shelf 1'),
    ('A2', 'Aisle A, shelf 2'),
    ('A3', 'Aisle A, shelf 3'),
    ('B1', 'Aisle B, shelf 1'),
    ('B2', 'Aisle B, shelf 2'),
    ('B3', 'Aisle B, shelf 3'),
    ('C1', 'Aisle C, shelf 1'),
    ('C2', 'Aisle C, shelf 2'),
    ('C3', 'Aisle C, shelf 3'),
    ('D1', 'Loading dock');
INSERT INTO items VALUES
    ('FAS-101', 'M6 hex bolt', 'Fasteners', 'B3', 101, 899),
    ('FAS-108', 'M8 hex bolt', 'Fasteners', 'A1', 0, 399),
    ('FAS-115', 'M6 nylon nut', 'Fasteners', 'A2', 14, 399),
    ('FAS-122', 'Wood screw 4x40', 'Fasteners', 'B1', 0, 180),
    ('FAS-129', 'Drywall screw 3.5x35', 'Fasteners', 'C1', 0, 25),
    ('FAS-136', 'Washer 8mm', 'Fasteners', 'C3', 144, 25),
    ('ELE-101', 'Cable tie 200mm', 'Electrical', 'B1', 149, 15),
    ('ELE-108', 'Wire nut', 'Electrical', 'D1', 12, 65),
    ('ELE-115', 'Light switch', 'Electrical', 'A1', 34, 90),
    ('ELE-122', 'Double socket', 'Electrical', 'C1', 30, 450),
    ('ELE-129', 'Cable clip 7mm', 'Electrical', 'B2', 174, 40),
    ('PLU-101', 'Copper pipe 15mm', 'Plumbing', 'A2', 163, 65),
    ('PLU-108', 'Elbow joint 15mm', 'Plumbing', 'B3', 0, 1299),
    ('PLU-115', 'PTFE tape', 'Plumbing', 'A2', 158, 65),
    ('PLU-122', 'Compression tee 22mm', 'Plumbing', 'C2', 109, 1850),
    ('PLU-129', 'Basin tap', 'Plumbing', 'B3', 116, 120),
    ('TOO-101', 'Claw hammer', 'Tools', 'B2', 46, 1299),
    ('TOO-108', 'Tape measure 5m', 'Tools', 'B1', 0, 90),
    ('TOO-115', 'Utility knife', 'Tools', 'C3', 87, 1299),
    ('TOO-122', 'Spirit level 60cm', 'Tools', 'C2', 18, 25),
    ('TOO-129', 'Hex key set', 'Tools', 'C3', 87, 40),
    ('PAI-101', 'Paint roller 9in', 'Paint', 'C2', 171, 25),
    ('PAI-108', 'Masking tape 25mm', 'Paint', 'C3', 80, 120),
    ('PAI-115', 'White emulsion 5L', 'Paint', 'B3', 148, 1850),
    ('PAI-122', 'Sandpaper P120', 'Paint', 'C2', 0, 25);
