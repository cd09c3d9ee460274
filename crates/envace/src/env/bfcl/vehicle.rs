//! BFCL's `VehicleControlAPI`: a car's engine, doors, climate, lights, brakes, cruise control
//! and navigation, with outside temperature and speed drawn from a seeded `random.Random`.
//! Numbers keep Python's int/float distinction and its order of float operations, so results
//! print the same digits.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::pyops::{self, Config, Num, Op, error, int_value};
use super::pyrandom::PyRandom;
use super::{Args, Backend, Method, Outcome, Raised, opt, req};
use crate::env::pyjson;
use crate::error::Result;

const CLASS: &str = "VehicleControlAPI";

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "startEngine",
        params: &[req("ignitionMode")],
    },
    Method {
        name: "fillFuelTank",
        params: &[req("fuelAmount")],
    },
    Method {
        name: "lockDoors",
        params: &[req("unlock"), req("door")],
    },
    Method {
        name: "adjustClimateControl",
        params: &[
            req("temperature"),
            opt("unit"),
            opt("fanSpeed"),
            opt("mode"),
        ],
    },
    Method {
        name: "get_outside_temperature_from_google",
        params: &[],
    },
    Method {
        name: "get_outside_temperature_from_weather_com",
        params: &[],
    },
    Method {
        name: "setHeadlights",
        params: &[req("mode")],
    },
    Method {
        name: "displayCarStatus",
        params: &[req("option")],
    },
    Method {
        name: "activateParkingBrake",
        params: &[req("mode")],
    },
    Method {
        name: "pressBrakePedal",
        params: &[req("pedalPosition")],
    },
    Method {
        name: "releaseBrakePedal",
        params: &[],
    },
    Method {
        name: "setCruiseControl",
        params: &[req("speed"), req("activate"), req("distanceToNextVehicle")],
    },
    Method {
        name: "get_current_speed",
        params: &[],
    },
    Method {
        name: "display_log",
        params: &[req("messages")],
    },
    Method {
        name: "estimate_drive_feasibility_by_mileage",
        params: &[req("distance")],
    },
    Method {
        name: "liter_to_gallon",
        params: &[req("liter")],
    },
    Method {
        name: "gallon_to_liter",
        params: &[req("gallon")],
    },
    Method {
        name: "estimate_distance",
        params: &[req("cityA"), req("cityB")],
    },
    Method {
        name: "get_zipcode_based_on_city",
        params: &[req("city")],
    },
    Method {
        name: "set_navigation",
        params: &[req("destination")],
    },
    Method {
        name: "check_tire_pressure",
        params: &[],
    },
    Method {
        name: "find_nearest_tire_shop",
        params: &[],
    },
];

const MAX_FUEL_LEVEL: i128 = 50;
const MIN_FUEL_LEVEL: f64 = 0.0;
const MILE_PER_GALLON: f64 = 20.0;
const DEFAULT_SEED: i128 = 141_053;
const DOORS: [&str; 4] = ["driver", "passenger", "rear_left", "rear_right"];

/// Zip code pairs (either order) and the distance between them.
const DISTANCES: [(&str, &str, f64); 12] = [
    ("83214", "74532", 750.0),
    ("56108", "62947", 320.0),
    ("71354", "83462", 450.0),
    ("47329", "52013", 290.0),
    ("69238", "51479", 630.0),
    ("94016", "83214", 980.0),
    ("94016", "94704", 600.0),
    ("94704", "08540", 2550.0),
    ("94016", "08540", 1950.0),
    ("62947", "47329", 1053.0),
    ("94016", "62947", 780.0),
    ("74532", "94016", 880.0),
];

/// City names and their zip codes.
const ZIP_CODES: [(&str, &str); 11] = [
    ("Rivermist", "83214"),
    ("Stonebrook", "74532"),
    ("Maplecrest", "56108"),
    ("Silverpine", "62947"),
    ("Shadowridge", "71354"),
    ("Sunset Valley", "83462"),
    ("Oakendale", "47329"),
    ("Willowbend", "52013"),
    ("Crescent Hollow", "69238"),
    ("Autumnville", "51479"),
    ("San Francisco", "94016"),
];

/// A value an attribute or a result holds: a float (NaN and infinities included, which JSON
/// numbers cannot hold), or any other value as JSON.
#[derive(Clone, Debug)]
enum Py {
    Float(f64),
    Json(Value),
}

impl Py {
    fn of(value: &Value) -> Py {
        match value {
            Value::Number(n) if n.is_f64() => Py::Float(n.as_f64().unwrap_or(f64::NAN)),
            other => Py::Json(other.clone()),
        }
    }

    fn str(text: &str) -> Py {
        Py::Json(Value::from(text))
    }

    fn from_num(n: Num) -> Py {
        match n {
            Num::Int(i) => Py::Json(int_value(i)),
            Num::Float(x) => Py::Float(x),
        }
    }

    fn num(&self) -> Option<Num> {
        match self {
            Py::Float(x) => Some(Num::Float(*x)),
            Py::Json(value) => Num::of(value),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Py::Float(_) => "float",
            Py::Json(value) => pyops::type_name(value),
        }
    }

    /// Python's `self == text`.
    fn is(&self, text: &str) -> bool {
        matches!(self, Py::Json(Value::String(s)) if s == text)
    }

    /// As JSON (a NaN or infinity, which JSON lacks, as `null`).
    fn to_value(&self) -> Value {
        match self {
            Py::Float(x) => pyops::float(*x),
            Py::Json(value) => value.clone(),
        }
    }

    /// As `json.dumps` writes it.
    fn dumps(&self) -> String {
        match self {
            Py::Float(x) => pyops::dumps_float(*x),
            Py::Json(value) => pyjson::dumps(value, false),
        }
    }
}

/// A dict result: as an object, or, when it holds a NaN or an infinity, as the text
/// `json.dumps` makes of it (`Infinity`, `NaN`), which the harness shows as it is.
fn reply(pairs: Vec<(&str, Py)>) -> Outcome {
    let finite = pairs
        .iter()
        .all(|(_, v)| !matches!(v, Py::Float(x) if !x.is_finite()));
    if finite {
        return Ok(Value::Object(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_value()))
                .collect(),
        ));
    }
    let items: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}: {}", pyjson::quote(k), v.dumps()))
        .collect();
    Ok(Value::String(format!("{{{}}}", items.join(", "))))
}

/// `a <op> b` for an ordering comparison of numbers (every comparison here has a number on
/// one side), with Python's `TypeError` for a non-number.
fn compare(a: &Py, op: &str, b: &Py) -> std::result::Result<bool, Raised> {
    match (a.num(), b.num()) {
        (Some(x), Some(y)) => Ok(pyops::holds(x.cmp(y), op)),
        _ => Err(pyops::not_supported(op, a.type_name(), b.type_name())),
    }
}

fn int(i: i64) -> Py {
    Py::Json(Value::from(i))
}

/// `value * factor` for a float `factor`, with Python's `TypeError` texts.
fn times_float(value: &Value, factor: f64) -> std::result::Result<f64, Raised> {
    match (Num::of(value), value) {
        (Some(n), _) => Ok(n.to_f64() * factor),
        (None, Value::String(_) | Value::Array(_)) => {
            Err("can't multiply sequence by non-int of type 'float'".into())
        }
        (None, other) => Err(pyops::unsupported_operands(
            "*",
            pyops::type_name(other),
            "float",
        )),
    }
}

/// The instance: its attributes (public and private) and its random generator.
pub struct VehicleControlApi {
    random: PyRandom,
    fuel_level: Py,
    battery_voltage: Py,
    engine_state: Py,
    remaining_unlocked_doors: i128,
    door_status: Map<String, Value>,
    ac_temperature: Py,
    fan_speed: Py,
    ac_mode: Py,
    humidity_level: Py,
    head_light_status: Py,
    parking_brake_status: Py,
    parking_brake_force: Py,
    slope_angle: Py,
    brake_pedal_status: Py,
    brake_pedal_force: Py,
    distance_to_next_vehicle: Py,
    cruise_status: Py,
    destination: Py,
    /// Front left, front right, rear left, rear right, in psi.
    tire_pressures: [Py; 4],
}

impl VehicleControlApi {
    /// `_load_scenario(config)`: the task's values, the module defaults for the rest; the
    /// count of unlocked doors follows the door statuses.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        let any = |key: &str, default: Py| config.get(key).map_or(default, Py::of);
        let number = |key: &str, default: f64| match config.get(key) {
            None => Ok(Py::Float(default)),
            Some(value @ Value::Number(_)) => Ok(Py::of(value)),
            Some(other) => Err(config.error(format!("`{key}` must be a number, not {other}"))),
        };
        let door_status = match config.object("doorStatus")? {
            None => DOORS
                .iter()
                .map(|d| ((*d).to_owned(), Value::from("unlocked")))
                .collect(),
            Some(map) => map.clone(),
        };
        let locked = door_status
            .values()
            .filter(|s| matches!(s, Value::String(s) if s == "locked"))
            .count();
        Ok(VehicleControlApi {
            random: PyRandom::new(config.seed(DEFAULT_SEED)?),
            fuel_level: number("fuelLevel", 0.0)?,
            battery_voltage: any("batteryVoltage", Py::Float(12.6)),
            engine_state: any("engineState", Py::str("stopped")),
            remaining_unlocked_doors: 4 - locked as i128,
            door_status,
            ac_temperature: any("acTemperature", Py::Float(25.0)),
            fan_speed: any("fanSpeed", int(50)),
            ac_mode: any("acMode", Py::str("auto")),
            humidity_level: any("humidityLevel", Py::Float(50.0)),
            head_light_status: any("headLightStatus", Py::str("off")),
            parking_brake_status: any("parkingBrakeStatus", Py::str("released")),
            parking_brake_force: any("parkingBrakeForce", Py::Float(0.0)),
            slope_angle: any("slopeAngle", Py::Float(0.0)),
            brake_pedal_status: any("brakePedalStatus", Py::str("released")),
            brake_pedal_force: any("brakePedalForce", Py::Float(0.0)),
            distance_to_next_vehicle: any("distanceToNextVehicle", Py::Float(50.0)),
            cruise_status: any("cruiseStatus", Py::str("inactive")),
            destination: any("destination", Py::str("None")),
            tire_pressures: [
                number("frontLeftTirePressure", 32.0)?,
                number("frontRightTirePressure", 32.0)?,
                number("rearLeftTirePressure", 30.0)?,
                number("rearRightTirePressure", 30.0)?,
            ],
        })
    }

    /// The fuel level as a number (the config and every update keep it one).
    fn fuel(&self) -> Num {
        self.fuel_level.num().unwrap_or(Num::Float(f64::NAN))
    }

    fn start_engine(&mut self, mode: &Value) -> Outcome {
        let mode = Py::of(mode);
        if mode.is("STOP") {
            self.engine_state = Py::str("stopped");
        }
        if self.remaining_unlocked_doors > 0 {
            let unlocked: Vec<&str> = self
                .door_status
                .iter()
                .filter(|(_, s)| matches!(s, Value::String(s) if s == "unlocked"))
                .map(|(d, _)| d.as_str())
                .collect();
            return error(format!(
                "All doors must be locked before starting the engine. Here are the unlocked doors: {}",
                unlocked.join(", ")
            ));
        }
        if !self.brake_pedal_status.is("pressed") {
            return error("Brake pedal needs to be pressed when starting the engine.");
        }
        let full = self
            .brake_pedal_force
            .num()
            .is_some_and(|f| f.cmp(Num::Float(1000.0)) == Some(Ordering::Equal));
        if !full {
            return error("Must press the brake fully before starting the engine.");
        }
        if self.fuel().cmp(Num::Float(MIN_FUEL_LEVEL)) == Some(Ordering::Less) {
            return error("Fuel tank is empty.");
        }
        if !mode.is("START") {
            return error("Invalid ignition mode.");
        }
        self.engine_state = Py::str("running");
        reply(vec![
            ("engineState", self.engine_state.clone()),
            ("fuelLevel", self.fuel_level.clone()),
            ("batteryVoltage", self.battery_voltage.clone()),
        ])
    }

    fn fill_fuel_tank(&mut self, amount: &Value) -> Outcome {
        let amount = Py::of(amount);
        if compare(&amount, "<", &int(0))? {
            return error("Fuel amount cannot be negative.");
        }
        // Past that comparison the amount is a number.
        let Some(n) = amount.num() else {
            return Err(pyops::unsupported_operands(
                "+",
                "float",
                amount.type_name(),
            ));
        };
        let total = self.fuel().apply(Op::Add, n)?;
        if total.cmp(Num::Int(MAX_FUEL_LEVEL)) == Some(Ordering::Greater) {
            return error("Cannot fill gas above the tank capacity.");
        }
        if total.cmp(Num::Float(MIN_FUEL_LEVEL)) == Some(Ordering::Less) {
            return error("Fuel tank is empty. Min fuel level is 0 gallons.");
        }
        self.fuel_level = Py::from_num(total);
        reply(vec![("fuelLevel", self.fuel_level.clone())])
    }

    fn lock_doors(&mut self, unlock: &Value, doors: &Value) -> Outcome {
        let (target, step) = if pyops::truthy(unlock) {
            ("unlocked", 1)
        } else {
            ("locked", -1)
        };
        for door in pyops::iterate(doors)? {
            let Value::String(name) = &door else {
                pyops::check_hashable(&door)?;
                return Err(pyops::key_error(&door));
            };
            let Some(status) = self.door_status.get_mut(name) else {
                return Err(pyops::key_error(&door));
            };
            if matches!(status, Value::String(s) if s == target) {
                continue;
            }
            *status = Value::from(target);
            self.remaining_unlocked_doors += step;
        }
        reply(vec![
            ("lockStatus", Py::str(target)),
            (
                "remainingUnlockedDoors",
                Py::Json(int_value(self.remaining_unlocked_doors)),
            ),
        ])
    }

    fn adjust_climate_control(&mut self, args: &Args) -> Outcome {
        let temperature = args.value("temperature");
        let unit = args.get("unit").map_or(Py::str("celsius"), Py::of);
        let fan_speed = args.get("fanSpeed").map_or(int(50), Py::of);
        let mode = args.get("mode").map_or(Py::str("auto"), Py::of);
        if !(compare(&int(0), "<=", &fan_speed)? && compare(&fan_speed, "<=", &int(100))?) {
            return error("Fan speed must be between 0 and 100.");
        }
        self.ac_temperature = Py::of(temperature);
        if unit.is("fahrenheit") {
            let Some(t) = Num::of(temperature) else {
                return Err(pyops::unsupported_operands(
                    "-",
                    pyops::type_name(temperature),
                    "int",
                ));
            };
            let scaled = t
                .apply(Op::Sub, Num::Int(32))?
                .apply(Op::Mul, Num::Int(5))?;
            self.ac_temperature = Py::from_num(scaled.apply(Op::Div, Num::Int(9))?);
        }
        self.fan_speed = fan_speed;
        self.ac_mode = mode.clone();
        reply(vec![
            ("currentACTemperature", Py::of(temperature)),
            ("climateMode", mode),
            ("humidityLevel", self.humidity_level.clone()),
        ])
    }

    fn set_headlights(&mut self, mode: &Value) -> Outcome {
        let mode = Py::of(mode);
        if !["on", "off", "auto"].iter().any(|m| mode.is(m)) {
            return error("Invalid headlight mode.");
        }
        let status = if mode.is("on") { "on" } else { "off" };
        self.head_light_status = Py::str(status);
        reply(vec![("headlightStatus", Py::str(status))])
    }

    fn display_car_status(&self, option: &Value) -> Outcome {
        let option = Py::of(option);
        let is = |name: &str| option.is(name);
        let status = if is("fuel") {
            vec![("fuelLevel", self.fuel_level.clone())]
        } else if is("battery") {
            vec![("batteryVoltage", self.battery_voltage.clone())]
        } else if is("doors") {
            vec![(
                "doorStatus",
                Py::Json(Value::Object(self.door_status.clone())),
            )]
        } else if is("climate") {
            vec![
                ("currentACTemperature", self.ac_temperature.clone()),
                ("fanSpeed", self.fan_speed.clone()),
                ("climateMode", self.ac_mode.clone()),
                ("humidityLevel", self.humidity_level.clone()),
            ]
        } else if is("headlights") {
            vec![("headlightStatus", self.head_light_status.clone())]
        } else if is("parkingBrake") {
            vec![
                ("parkingBrakeStatus", self.parking_brake_status.clone()),
                ("parkingBrakeForce", self.parking_brake_force.clone()),
                ("slopeAngle", self.slope_angle.clone()),
            ]
        } else if is("brakePedal") {
            vec![
                ("brakePedalStatus", self.brake_pedal_status.clone()),
                ("brakePedalForce", self.brake_pedal_force.clone()),
            ]
        } else if is("engine") {
            vec![("engineState", self.engine_state.clone())]
        } else {
            vec![("error", Py::str("Invalid option"))]
        };
        reply(status)
    }

    fn activate_parking_brake(&mut self, mode: &Value) -> Outcome {
        let mode = Py::of(mode);
        let (status, force) = if mode.is("engage") {
            ("engaged", 500.0)
        } else if mode.is("release") {
            ("released", 0.0)
        } else {
            return error("Invalid mode");
        };
        self.parking_brake_status = Py::str(status);
        self.parking_brake_force = Py::Float(force);
        self.slope_angle = Py::Float(10.0);
        reply(vec![
            ("parkingBrakeStatus", Py::str(status)),
            ("_parkingBrakeForce", Py::Float(force)),
            ("_slopeAngle", Py::Float(10.0)),
        ])
    }

    fn press_brake_pedal(&mut self, position: &Value) -> Outcome {
        let position = Py::of(position);
        if !(compare(&int(0), "<=", &position)? && compare(&position, "<=", &int(1))?) {
            return error("Pedal position must be between 0 and 1.");
        }
        let Some(p) = position.num() else {
            return error("Pedal position must be between 0 and 1.");
        };
        if p.cmp(Num::Int(0)) == Some(Ordering::Equal) {
            return self.release_brake_pedal();
        }
        let force = p.apply(Op::Mul, Num::Int(1000))?;
        self.brake_pedal_status = Py::str("pressed");
        self.brake_pedal_force = Py::from_num(force);
        reply(vec![
            ("brakePedalStatus", Py::str("pressed")),
            ("brakePedalForce", Py::Float(force.to_f64())),
        ])
    }

    fn release_brake_pedal(&mut self) -> Outcome {
        self.brake_pedal_status = Py::str("released");
        self.brake_pedal_force = Py::Float(0.0);
        reply(vec![
            ("brakePedalStatus", Py::str("released")),
            ("brakePedalForce", Py::Float(0.0)),
        ])
    }

    fn set_cruise_control(&mut self, args: &Args) -> Outcome {
        let distance = pyops::to_float(args.value("distanceToNextVehicle"))?;
        let speed = pyops::to_float(args.value("speed"))?;
        if self.engine_state.is("stopped") {
            return error("Start the engine before activating the cruise control.");
        }
        self.distance_to_next_vehicle = Py::Float(distance);
        let status = if pyops::truthy(args.value("activate")) {
            // A NaN fails the range test, as it fails Python's `% 5 != 0`.
            if !(0.0..=120.0).contains(&speed) || speed % 5.0 != 0.0 {
                return error("Invalid speed");
            }
            "active"
        } else {
            "inactive"
        };
        self.cruise_status = Py::str(status);
        reply(vec![
            ("cruiseStatus", Py::str(status)),
            ("currentSpeed", Py::Float(speed)),
            ("distanceToNextVehicle", Py::Float(distance)),
        ])
    }

    fn estimate_drive_feasibility(&self, distance: &Value) -> Outcome {
        let range = Py::from_num(self.fuel().apply(Op::Mul, Num::Float(MILE_PER_GALLON))?);
        let short = compare(&range, "<", &Py::of(distance))?;
        reply(vec![("canDrive", Py::Json(Value::Bool(!short)))])
    }

    fn estimate_distance(a: &Value, b: &Value) -> Outcome {
        let (a, b) = (Py::of(a), Py::of(b));
        let found = DISTANCES
            .iter()
            .find(|(x, y, _)| (a.is(x) && b.is(y)) || (a.is(y) && b.is(x)));
        match found {
            Some((_, _, km)) => reply(vec![("distance", Py::Float(*km))]),
            None => error("distance not found in database."),
        }
    }

    fn set_navigation(&mut self, destination: &Value) -> Outcome {
        self.destination = Py::of(destination);
        let status = pyops::arith(Op::Add, &Value::from("Navigating to "), destination, false)?;
        reply(vec![("status", Py::Json(status))])
    }

    fn check_tire_pressure(&self) -> Outcome {
        let pressures: Vec<Num> = self
            .tire_pressures
            .iter()
            .map(|p| p.num().unwrap_or(Num::Float(f64::NAN)))
            .collect();
        let mut total = pressures[0];
        for p in &pressures[1..] {
            total = total.apply(Op::Add, *p)?;
        }
        let average = Py::from_num(total.apply(Op::Div, Num::Int(4))?);
        let healthy = compare(&int(30), "<=", &average)? && compare(&average, "<=", &int(35))?;
        let [front_left, front_right, rear_left, rear_right] = self.tire_pressures.clone();
        reply(vec![
            ("frontLeftTirePressure", front_left),
            ("frontRightTirePressure", front_right),
            ("rearLeftTirePressure", rear_left),
            ("rearRightTirePressure", rear_right),
            ("healthy_tire_pressure", Py::Json(Value::Bool(healthy))),
            ("car_info", Py::Json(Value::Object(Map::new()))),
        ])
    }
}

impl Backend for VehicleControlApi {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "startEngine" => self.start_engine(args.value("ignitionMode")),
            "fillFuelTank" => self.fill_fuel_tank(args.value("fuelAmount")),
            "lockDoors" => self.lock_doors(args.value("unlock"), args.value("door")),
            "adjustClimateControl" => self.adjust_climate_control(args),
            "get_outside_temperature_from_google" => {
                let t = self.random.uniform(-10.0, 40.0);
                reply(vec![("outsideTemperature", Py::Float(t))])
            }
            "get_outside_temperature_from_weather_com" => reply(vec![("error", int(404))]),
            "setHeadlights" => self.set_headlights(args.value("mode")),
            "displayCarStatus" => self.display_car_status(args.value("option")),
            "activateParkingBrake" => self.activate_parking_brake(args.value("mode")),
            "pressBrakePedal" => self.press_brake_pedal(args.value("pedalPosition")),
            "releaseBrakePedal" => self.release_brake_pedal(),
            "setCruiseControl" => self.set_cruise_control(args),
            "get_current_speed" => {
                let speed = self.random.uniform(0.0, 120.0);
                reply(vec![("currentSpeed", Py::Float(speed))])
            }
            "display_log" => reply(vec![("log", Py::Json(args.value("messages").clone()))]),
            "estimate_drive_feasibility_by_mileage" => {
                self.estimate_drive_feasibility(args.value("distance"))
            }
            "liter_to_gallon" => {
                let gallon = times_float(args.value("liter"), 0.264172)?;
                reply(vec![("gallon", Py::Float(gallon))])
            }
            "gallon_to_liter" => {
                let liter = times_float(args.value("gallon"), 3.78541)?;
                reply(vec![("liter", Py::Float(liter))])
            }
            "estimate_distance" => {
                Self::estimate_distance(args.value("cityA"), args.value("cityB"))
            }
            "get_zipcode_based_on_city" => {
                let city = Py::of(args.value("city"));
                let zip = ZIP_CODES
                    .iter()
                    .find(|(name, _)| city.is(name))
                    .map_or("00000", |(_, zip)| zip);
                reply(vec![("zipcode", Py::str(zip))])
            }
            "set_navigation" => self.set_navigation(args.value("destination")),
            "check_tire_pressure" => self.check_tire_pressure(),
            "find_nearest_tire_shop" => reply(vec![(
                "shopLocation",
                Py::str("456 Oakwood Avenue, Rivermist, 83214"),
            )]),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let fields: [(&str, Value); 20] = [
            ("fuelLevel", self.fuel_level.to_value()),
            ("batteryVoltage", self.battery_voltage.to_value()),
            ("engine_state", self.engine_state.to_value()),
            (
                "remainingUnlockedDoors",
                int_value(self.remaining_unlocked_doors),
            ),
            ("doorStatus", Value::Object(self.door_status.clone())),
            ("acTemperature", self.ac_temperature.to_value()),
            ("fanSpeed", self.fan_speed.to_value()),
            ("acMode", self.ac_mode.to_value()),
            ("humidityLevel", self.humidity_level.to_value()),
            ("headLightStatus", self.head_light_status.to_value()),
            ("parkingBrakeStatus", self.parking_brake_status.to_value()),
            ("brakePedalStatus", self.brake_pedal_status.to_value()),
            (
                "distanceToNextVehicle",
                self.distance_to_next_vehicle.to_value(),
            ),
            ("cruiseStatus", self.cruise_status.to_value()),
            ("destination", self.destination.to_value()),
            ("frontLeftTirePressure", self.tire_pressures[0].to_value()),
            ("frontRightTirePressure", self.tire_pressures[1].to_value()),
            ("rearLeftTirePressure", self.tire_pressures[2].to_value()),
            ("rearRightTirePressure", self.tire_pressures[3].to_value()),
            ("long_context", Value::Bool(false)),
        ];
        fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pyops::harness;
    use super::*;
    use serde_json::json;

    /// One default instance through odd arguments; each expected text is what BFCL's Python
    /// class answered to the same sequence (CPython 3.11).
    #[test]
    fn odd_arguments_answer_as_python_does() {
        let mut v = VehicleControlApi::load(&Map::new()).unwrap();
        let steps: &[(&str, Value, &str)] = &[
            (
                "get_outside_temperature_from_google",
                json!({}),
                r#"{"outsideTemperature": 36.63485703790535}"#,
            ),
            (
                "get_current_speed",
                json!({}),
                r#"{"currentSpeed": 99.11925428879405}"#,
            ),
            (
                "fillFuelTank",
                json!({"fuelAmount": "5"}),
                "Error during execution: '<' not supported between instances of 'str' and 'int'",
            ),
            (
                "fillFuelTank",
                json!({"fuelAmount": true}),
                r#"{"fuelLevel": 1.0}"#,
            ),
            (
                "lockDoors",
                json!({"unlock": false, "door": "driver"}),
                "Error during execution: 'd'",
            ),
            (
                "lockDoors",
                json!({"unlock": false, "door": ["driver", 5]}),
                "Error during execution: 5",
            ),
            (
                "adjustClimateControl",
                json!({"temperature": 1e308, "unit": "fahrenheit"}),
                r#"{"currentACTemperature": 1e+308, "climateMode": "auto", "humidityLevel": 50.0}"#,
            ),
            (
                "displayCarStatus",
                json!({"option": "climate"}),
                r#"{"currentACTemperature": Infinity, "fanSpeed": 50, "climateMode": "auto", "humidityLevel": 50.0}"#,
            ),
            (
                "adjustClimateControl",
                json!({"temperature": "hot", "unit": "fahrenheit", "fanSpeed": 10}),
                "Error during execution: unsupported operand type(s) for -: 'str' and 'int'",
            ),
            (
                "displayCarStatus",
                json!({"option": "climate"}),
                r#"{"currentACTemperature": "hot", "fanSpeed": 50, "climateMode": "auto", "humidityLevel": 50.0}"#,
            ),
            (
                "adjustClimateControl",
                json!({"temperature": 72, "unit": "fahrenheit"}),
                r#"{"currentACTemperature": 72, "climateMode": "auto", "humidityLevel": 50.0}"#,
            ),
            (
                "displayCarStatus",
                json!({"option": "climate"}),
                r#"{"currentACTemperature": 22.22222222222222, "fanSpeed": 50, "climateMode": "auto", "humidityLevel": 50.0}"#,
            ),
            (
                "adjustClimateControl",
                json!({"temperature": 20, "fanSpeed": "x"}),
                "Error during execution: '<=' not supported between instances of 'int' and 'str'",
            ),
            (
                "setCruiseControl",
                json!({"speed": "abc", "activate": true, "distanceToNextVehicle": 3}),
                "Error during execution: could not convert string to float: 'abc'",
            ),
            (
                "setCruiseControl",
                json!({"speed": null, "activate": true, "distanceToNextVehicle": 3}),
                "Error during execution: float() argument must be a string or a real number, not 'NoneType'",
            ),
            (
                "lockDoors",
                json!({"unlock": false, "door": ["passenger", "rear_left", "rear_right"]}),
                r#"{"lockStatus": "locked", "remainingUnlockedDoors": 0}"#,
            ),
            (
                "pressBrakePedal",
                json!({"pedalPosition": true}),
                r#"{"brakePedalStatus": "pressed", "brakePedalForce": 1000.0}"#,
            ),
            (
                "startEngine",
                json!({"ignitionMode": "START"}),
                r#"{"engineState": "running", "fuelLevel": 1.0, "batteryVoltage": 12.6}"#,
            ),
            (
                "setCruiseControl",
                json!({"speed": " inf ", "activate": false, "distanceToNextVehicle": "1_000"}),
                r#"{"cruiseStatus": "inactive", "currentSpeed": Infinity, "distanceToNextVehicle": 1000.0}"#,
            ),
            (
                "setCruiseControl",
                json!({"speed": 62.5, "activate": true, "distanceToNextVehicle": 20}),
                r#"{"error": "Invalid speed"}"#,
            ),
            (
                "displayCarStatus",
                json!({"option": "brakePedal"}),
                r#"{"brakePedalStatus": "pressed", "brakePedalForce": 1000}"#,
            ),
            (
                "liter_to_gallon",
                json!({"liter": "3"}),
                "Error during execution: can't multiply sequence by non-int of type 'float'",
            ),
            (
                "gallon_to_liter",
                json!({"gallon": null}),
                "Error during execution: unsupported operand type(s) for *: 'NoneType' and 'float'",
            ),
            (
                "gallon_to_liter",
                json!({"gallon": 1e308}),
                r#"{"liter": Infinity}"#,
            ),
            (
                "set_navigation",
                json!({"destination": 5}),
                r#"Error during execution: can only concatenate str (not "int") to str"#,
            ),
            (
                "estimate_drive_feasibility_by_mileage",
                json!({"distance": "x"}),
                "Error during execution: '<' not supported between instances of 'float' and 'str'",
            ),
            (
                "estimate_drive_feasibility_by_mileage",
                json!({"distance": 20}),
                r#"{"canDrive": true}"#,
            ),
            (
                "pressBrakePedal",
                json!({"pedalPosition": "1"}),
                "Error during execution: '<=' not supported between instances of 'int' and 'str'",
            ),
            (
                "check_tire_pressure",
                json!({}),
                r#"{"frontLeftTirePressure": 32.0, "frontRightTirePressure": 32.0, "rearLeftTirePressure": 30.0, "rearRightTirePressure": 30.0, "healthy_tire_pressure": true, "car_info": {}}"#,
            ),
            (
                "fillFuelTank",
                json!({"fuelAmount": 49}),
                r#"{"fuelLevel": 50.0}"#,
            ),
        ];
        harness::script(&mut v, steps);
        let state = v.state();
        assert_eq!(state["acTemperature"], json!(22.222_222_222_222_22));
        assert_eq!(state["distanceToNextVehicle"], json!(20.0));
        assert_eq!(state["cruiseStatus"], json!("inactive"));
        assert_eq!(state["destination"], json!(5));
        assert_eq!(state["remainingUnlockedDoors"], json!(0));
        assert_eq!(state["doorStatus"]["driver"], json!("locked"));
    }

    #[test]
    fn bad_config_is_an_error_not_a_panic() {
        let config = json!({"fuelLevel": "full"});
        let Value::Object(map) = config else {
            unreachable!()
        };
        assert!(VehicleControlApi::load(&map).is_err());
    }
}
